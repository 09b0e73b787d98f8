"""Streaming throttle for generated answers: a token bucket per client class, sentence-sized releases,
and an early stop when the answer has clearly concluded (a closing sentence starts outside code).

Pure: the caller passes the clock (`now`, seconds) and sleeps `wait_s` itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from streams import tokens
from streams.output.patterns import Patterns, resolve

# Tokens per second each client class can take, also its burst size.
CLIENT_RATES = {"mobile": 256, "desktop": 512}
SENTENCE_PIECES = re.compile(r"(?<=[.!?。！？\n])")
RELEASE_END = re.compile(r"[.!?](?=\s)|[。！？]|\n")


class TokenBucket:
    """`rate` tokens per second, at most `capacity` saved up. Taking more than is there runs a debt the
    sender waits out: take() returns the seconds to wait before sending."""

    def __init__(self, rate: float, capacity: float | None = None, now: float = 0.0):
        if rate <= 0:
            raise ValueError(f"token bucket rate must be > 0 tokens/s, got {rate}")
        self.rate = rate
        self.capacity = rate if capacity is None else capacity
        self.level = self.capacity
        self.updated = now

    def take(self, n: int, now: float) -> float:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now
        self.level -= n
        return 0.0 if self.level >= 0 else -self.level / self.rate


@dataclass
class Emit:
    text: str  # send this now (after waiting wait_s)
    wait_s: float
    tokens: int  # tokens in text
    sent_tokens: int  # progress marker: tokens released so far
    done: bool  # the answer concluded: stop generating


class StreamThrottle:
    def __init__(self, client_class: str, model: str, *, now: float = 0.0, config: Patterns | str | None = None,
                 rates: dict[str, int] = CLIENT_RATES):
        if client_class not in rates:
            raise ValueError(f"unknown client class {client_class!r}; use one of {', '.join(rates)}")
        self.bucket = TokenBucket(rates[client_class], now=now)
        self.model = model
        self.patterns = resolve(config)
        self.pending = ""
        self.sent_tokens = 0
        self.in_code = False
        self.line_start = True
        self.done = False

    def feed(self, chunk: str, now: float) -> Emit:
        """Add generated text; release the complete sentences in it."""
        self.pending += chunk
        last = None
        for last in RELEASE_END.finditer(self.pending):
            pass
        if self.done or last is None:
            return self._emit("", now)
        ready, self.pending = self.pending[:last.end()], self.pending[last.end():]
        return self._emit(ready, now)

    def finish(self, now: float) -> Emit:
        """Release what is held back at the end of generation."""
        ready, self.pending = self.pending, ""
        return self._emit(ready, now)

    def _emit(self, ready: str, now: float) -> Emit:
        kept = []
        for piece in SENTENCE_PIECES.split(ready) if ready and not self.done else []:
            if self.line_start and piece.lstrip().startswith(("```", "~~~")):
                self.in_code = not self.in_code
            answered = self.sent_tokens > 0 or any(k.strip() for k in kept)
            if answered and not self.in_code and self.patterns.closer.fullmatch(piece.strip()):
                self.done = True
                break
            kept.append(piece)
            self.line_start = piece.endswith("\n")
        text = "".join(kept)
        n = tokens.count(text, self.model)
        self.sent_tokens += n
        wait = self.bucket.take(n, now) if n else 0.0
        return Emit(text, wait, n, self.sent_tokens, self.done)
