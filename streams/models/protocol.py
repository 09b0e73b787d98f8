"""What every engine gives, whatever runs it (in-process model, HTTP model server, no model at all).

A scorer scores candidates against a context (`score`, and `score_many` for a micro-batch); a generator answers a
prompt (`generate`, and `stream` for text pieces in order). Each call carries two counts: the engine's own and,
where a model server reported one, the server's (`server`), which settles the bill. An engine that cannot reach
its model raises `ModelUnavailable`, and the scoring engine falls back with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol


class ModelUnavailable(Exception):
    """The model could not answer (connect error, 429/5xx after retries, an open circuit, a malformed body): the
    caller falls back with `reason`, model_unavailable; `timeout` when the decision's own time ran out first (the
    server was slow, not down)."""

    def __init__(self, message: str, reason: str = "model_unavailable"):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Usage:
    """A server's own count of one call (its OpenAI-style `usage`): what it bills."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt_tokens_details.cached_tokens: a subset of prompt_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )


@dataclass
class Scored:
    scores: list[float]
    input_tokens: int = 0
    cache_read_tokens: int = 0  # subset of input_tokens served from a cache (OTel GenAI semantics)
    output_tokens: int = 0
    server: Usage | None = None  # the model server's usage of this call, when it reported one
    calls: int = 0  # requests sent to a model server for it


@dataclass
class Generated:
    text: str
    input_tokens: int  # in the backend's own tokenizer
    output_tokens: int
    model: str
    label: str  # "llm" for a model's output, "extractive" for copied source lines
    latency_ms: float = 0.0
    server: Usage | None = None
    confidence: float | None = None  # mean probability of its tokens, where the engine reports them


@dataclass
class Streaming:
    """A generation in progress: iterate it for the text pieces in order; close() stops the generation
    early (the stream reached its length). Once the stream has ended, `output_tokens` holds the count of every
    token it generated, pieces the caller never read included: a model server's own count where the stream carried
    one (what it bills), else the engine's in its own tokenizer; `server` is the server's usage, where it sent one."""

    pieces: Iterator[str]
    input_tokens: int  # in the backend's own tokenizer
    model: str
    label: str
    server: Usage | None = None
    output_tokens: int | None = None  # None: the engine did not count them (the caller counts the text it read)
    abandoned: bool = False  # cancel() was called: the caller went away

    def __iter__(self) -> Iterator[str]:
        return self.pieces

    def close(self) -> None:
        close = getattr(self.pieces, "close", None)
        if close is not None:
            close()

    def cancel(self) -> None:
        """close(), the caller gone: a model server's stream is cut at once, its closing usage not waited for (what
        it sent is still counted)."""
        self.abandoned = True
        self.close()


class Scorer(Protocol):
    name: str
    model: str
    temperature: float  # scale of its scores, for the softmax confidence

    def score(self, context: str, candidates: list[str]) -> Scored: ...


class Generator(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def label(self) -> str: ...

    def generate(self, prompt: str, max_tokens: int) -> Generated: ...

    def stream(self, prompt: str, max_tokens: int) -> Streaming: ...
