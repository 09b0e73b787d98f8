"""Streamed answers: the plan of one stream (question type → output length, client → chunk size and pace), the
cleanup of text as it is generated, its cut into ordered Chunks, and the token bucket that paces them.

Pure: the caller feeds generated text, gets Chunks back and asks the Pacer how long to wait. Cleanup gives what
clean() gives on the whole text without holding it all: text is released at sentence ends, and closing sentences
are held back and dropped only if nothing but closers follows them. Configuration: stream.yaml.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from schemas.records import Chunk, Decision, Request
from streams.output.clean import clean, closer_rest
from streams.output.patterns import Patterns, resolve
from streams.output.throttle import TokenBucket
from streams.text import tokens

BUNDLED = Path(__file__).with_name("stream.yaml")
SENTENCE_END = re.compile(r"[.!?:](?=\s)|[。！？：]|\n")
FENCE_LINE = re.compile(r"^[ \t]*(?:`{3,}|~{3,})", re.MULTILINE)
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
FIRST_RELEASE_SENTENCES = 3  # the start is cleaned as one piece: "Sure! Here is …:" needs a sentence after it


@dataclass(frozen=True)
class ClientSpec:
    chunk_tokens: int
    tokens_per_s: float


@dataclass(frozen=True)
class StreamConfig:
    lengths: dict[str, int]  # question type → output tokens
    rules: dict[str, re.Pattern]  # question type → pattern that makes a question that type
    aliases: dict[str, str]
    default_type: str
    clients: dict[str, ClientSpec]
    default_client: str

    def question_type(self, request: Request) -> str:
        """The declared type (or its alias), else the first type whose rule matches the question."""
        if request.question_type:
            return self.canonical(request.question_type)
        question = question_text(request)
        for qtype, rule in self.rules.items():
            if rule.search(question):
                return qtype
        return self.default_type

    def canonical(self, qtype: str) -> str:
        name = self.aliases.get(qtype, qtype)
        if name not in self.lengths:
            raise ValueError(
                f"question_type {qtype!r} is not configured; use one of "
                f"{', '.join(sorted([*self.lengths, *self.aliases]))}"
            )
        return name

    def client(self, name: str) -> ClientSpec:
        spec = self.clients.get(name or self.default_client)
        if spec is None:
            raise ValueError(f"client {name!r} is not configured; use one of {', '.join(sorted(self.clients))}")
        return spec

    def plan(self, request: Request) -> Plan:
        qtype = self.question_type(request)
        client = request.client or self.default_client
        spec = self.client(client)
        length = min(self.lengths[qtype], request.contracts.max_output_tokens)
        return Plan(qtype, client, length, spec.chunk_tokens, spec.tokens_per_s)


@dataclass(frozen=True)
class Plan:
    """How one request streams."""

    question_type: str
    client: str
    length: int  # output tokens at most
    chunk_tokens: int
    tokens_per_s: float


def question_text(request: Request) -> str:
    """The question the rules classify: a state object's `question`, else the first line of the state (the
    reference text a request may carry below it does not make a question creative)."""
    state = request.state
    if isinstance(state, dict):
        return str(state.get("question") or " ".join(str(v) for v in state.values()))
    return next((line for line in str(state).splitlines() if line.strip()), "")


def _positive(value, where: str, file: Path) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{file}: {where} must be a positive integer, got {value!r}")
    return value


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> StreamConfig:
    """The bundled stream.yaml, or the file at `path` (settings.stream_config)."""
    file = Path(path) if path else BUNDLED
    raw = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
    types = raw.get("types") or {}
    if not types:
        raise ValueError(f"{file}: `types` must name at least one question type with its max_output_tokens")
    lengths = {
        name: _positive((spec or {}).get("max_output_tokens"), f"types.{name}.max_output_tokens", file)
        for name, spec in types.items()
    }
    rules = {
        name: re.compile("|".join(f"(?:{r})" for r in spec["rules"]), re.IGNORECASE)
        for name, spec in types.items()
        if (spec or {}).get("rules")
    }
    clients = {
        name: ClientSpec(
            _positive((spec or {}).get("chunk_tokens"), f"clients.{name}.chunk_tokens", file),
            float(_positive((spec or {}).get("tokens_per_s"), f"clients.{name}.tokens_per_s", file)),
        )
        for name, spec in (raw.get("clients") or {}).items()
    }
    config = StreamConfig(
        lengths,
        rules,
        dict(raw.get("aliases") or {}),
        str(raw.get("default_type", "")),
        clients,
        str(raw.get("default_client", "")),
    )
    if config.default_type not in lengths:
        raise ValueError(f"{file}: default_type {config.default_type!r} must be one of {', '.join(lengths)}")
    if config.default_client not in clients:
        raise ValueError(
            f"{file}: default_client {config.default_client!r} must be one of "
            f"{', '.join(clients) or '(no clients configured)'}"
        )
    for alias, target in config.aliases.items():
        if target not in lengths:
            raise ValueError(f"{file}: alias {alias!r} points to {target!r}, not one of {', '.join(lengths)}")
    return config


class StreamCleaner:
    """Cleans generated text as it arrives; feed() and finish() return the text safe to release now."""

    def __init__(self, model: str, patterns: Patterns | str | None = None, enabled: bool = True):
        self.model = model
        self.patterns = resolve(patterns)
        self.enabled = enabled
        self.pending = ""  # not yet at a sentence end
        self.held = ""  # closing sentences, released only if an answer sentence follows
        self.started = False  # the start of the answer went out (through clean())
        self.in_code = False
        self.line_start = True  # the next released piece starts a line

    def feed(self, text: str) -> str:
        self.pending += text
        if not self.enabled:
            out, self.pending = self.pending, ""
            return out
        if not self.started:
            complete = [p for p in _pieces(self.pending)[:-1] if p.strip()]
            if len(complete) < FIRST_RELEASE_SENTENCES or _opens_block(self.pending):
                return ""
        cut = next(
            (
                end
                for end in reversed([m.end() for m in SENTENCE_END.finditer(self.pending)])
                if not _opens_block(self.pending[:end])
            ),
            None,
        )
        if cut is None:
            return ""
        ready, self.pending = self.pending[:cut], self.pending[cut:]
        return self._release(ready, final=False)

    def finish(self) -> str:
        """The rest, at the end of generation: trailing closers are dropped here."""
        ready, self.pending = self.pending, ""
        if not self.enabled:
            return ready
        return self._release(ready, final=True)

    def _release(self, ready: str, final: bool) -> str:
        p = self.patterns
        if not self.started:
            self.started = True
            if ready.strip():
                ready = clean(ready, model=self.model, config=p).text + _trailing_space(ready)
                self.in_code = len(FENCE_LINE.findall(ready)) % 2 == 1
                self.line_start = ready.endswith("\n")
                ready, self.held = _split_closers(ready, p) if not self.in_code else (ready, "")
                return ready
        if not self.in_code and not FENCE_LINE.search(ready):
            ready = p.debug_block.sub("", ready)  # a block may span sentences: whole ones are released together
        out = []
        for piece in _pieces(ready):
            starts_line, self.line_start = self.line_start, piece.endswith("\n")
            if starts_line and FENCE_LINE.match(piece):
                self.in_code = not self.in_code
            elif not self.in_code:
                piece = p.debug_block.sub("", piece)
                if starts_line:  # debug lines are whole lines, as in clean()
                    piece = p.debug_line.sub("", piece)
                rest = closer_rest(piece, p) if piece.strip() else ""
                if rest == "":
                    self.held += piece  # whitespace or a closer: out only if an answer sentence follows
                    continue
                if rest is not None:  # a closing sentence that also carries content: its filler clauses go
                    piece = rest + _trailing_space(piece)
            out.append(self.held + piece)
            self.held = ""
        if final:
            self.held = ""
            return "".join(out).rstrip()
        return "".join(out)


def _opens_block(text: str) -> bool:
    """`text` leaves a <think> block open: it is not released until the block closes."""
    return text.count(THINK_OPEN) > text.count(THINK_CLOSE)


def _trailing_space(text: str) -> str:
    return text[len(text.rstrip()) :] if text.strip() else ""


def _pieces(text: str) -> list[str]:
    """Sentences and lines of `text`, each with its ending and the whitespace after it."""
    out, pos = [], 0
    for m in SENTENCE_END.finditer(text):
        end = m.end()
        while end < len(text) and text[end] in " \t":
            end += 1
        out.append(text[pos:end])
        pos = end
    if pos < len(text):
        out.append(text[pos:])
    return [p for p in out if p]


def _split_closers(text: str, p: Patterns) -> tuple[str, str]:
    """`text` less the closing sentences it ends with, and those sentences (held until something follows)."""
    pieces = _pieces(text)
    cut = len(pieces)
    while cut > 1 and (not pieces[cut - 1].strip() or closer_rest(pieces[cut - 1], p) == ""):
        cut -= 1
    return "".join(pieces[:cut]), "".join(pieces[cut:])


class Chunker:
    """Cuts released text into ordered Chunks of about `chunk_tokens` tokens (at word boundaries where
    possible), and the whole answer at `length` tokens. Token counts are in `model`'s tokenizer; a chunk's
    `tokens` is its own text counted, so the answer's tokens are exactly the sum over its chunks."""

    def __init__(self, request_id: str, *, length: int, chunk_tokens: int, model: str, cut: bool = True):
        """`cut`: end the answer at `length` tokens; without it, `length` only scales the progress."""
        if length <= 0 or chunk_tokens <= 0:
            raise ValueError(f"stream length ({length}) and chunk size ({chunk_tokens}) must be positive tokens")
        self.request_id, self.length, self.chunk_tokens, self.model = request_id, length, chunk_tokens, model
        self.cut = cut
        self.enc = tokens.for_model(model)
        self.buffer = ""
        self.seq = 0
        self.tokens_so_far = 0
        self.full = False  # the answer reached its length: stop generating
        self.closed = False

    def feed(self, text: str) -> list[Chunk]:
        if self.full or self.closed:
            return []
        self.buffer += text
        out = []
        while self.buffer:
            ids = self.enc.encode_ordinary(self.buffer)
            room = self.length - self.tokens_so_far if self.cut else len(ids) + self.chunk_tokens + 1
            if room > self.chunk_tokens:
                if len(ids) <= self.chunk_tokens:
                    break
                head = self._prefix(ids, self.chunk_tokens, at_word=True)
            elif len(ids) < room:
                break
            else:  # the last chunk the length allows
                head = self._prefix(ids, room, at_word=False)
                while head and tokens.count(head, self.model) > room:
                    head = self._prefix(self.enc.encode_ordinary(head), room - 1, at_word=False)
                    room -= 1
                self.full = True
            self.buffer = self.buffer[len(head) :]
            out.append(self._chunk(head, tokens.count(head, self.model), final=self.full))
            if self.full:  # the answer's last chunk: what follows is cut
                self.buffer, self.closed = "", True
        return out

    def finish(self) -> list[Chunk]:
        """What is left as the final chunk (empty when nothing is left); nothing when the length already
        ended the answer."""
        if self.closed:
            return []
        rest, self.buffer = self.buffer, ""
        self.closed = True
        return [self._chunk(rest, tokens.count(rest, self.model) if rest else 0, final=True)]

    def _prefix(self, ids: list[int], n: int, at_word: bool) -> str:
        """The text of the first `n` tokens, ended at the last whitespace when `at_word` and one is in it
        past the middle. Never empty while the buffer is not."""
        k = n
        head = self.enc.decode(ids[:k])
        while k > 1 and not self.buffer.startswith(head):  # a multi-byte character split between tokens
            k -= 1
            head = self.enc.decode(ids[:k])
        if not self.buffer.startswith(head) or not head:
            return self.buffer[: max(1, len(head))]
        if at_word:
            space = max(head.rfind(" "), head.rfind("\n"))
            if space > len(head) // 2:
                head = head[: space + 1]
        return head

    def _chunk(self, text: str, n: int, final: bool) -> Chunk:
        self.tokens_so_far += n
        progress = 100 if final else min(100, round(100 * self.tokens_so_far / self.length))
        chunk = Chunk(
            request_id=self.request_id,
            seq=self.seq,
            text=text,
            tokens=n,
            tokens_so_far=self.tokens_so_far,
            progress=progress,
            final=final,
        )
        self.seq += 1
        return chunk


class Pacer:
    """The token bucket of one response: `tokens_per_s`, holding one chunk, so the first chunk goes out at
    once and each later one waits until the rate allows it. Off (the postprocess.throttle switch), no waits."""

    def __init__(self, tokens_per_s: float, chunk_tokens: int, now: float):
        self.bucket = TokenBucket(tokens_per_s, capacity=chunk_tokens, now=now)

    def wait(self, n: int, now: float, enabled: bool = True) -> float:
        """Seconds to wait before sending a chunk of `n` tokens at `now`."""
        if not enabled or not n:
            return 0.0
        return self.bucket.take(n, now)


def reserved_output(request: Request, config: StreamConfig | None = None) -> int:
    """The output tokens a request may spend: a stream's planned length, else its contract's maximum."""
    if request.stream and request.kind == "generate" and not request.candidates:
        return (config or load()).plan(request).length
    return request.contracts.max_output_tokens


def chunk_text(request_id: str, text: str, plan: Plan, model: str, now: float = 0.0, tenant: str = "") -> list[Chunk]:
    """An answer that exists already (a cache hit, a rule, a fallback) as the chunks of a stream, whole, for
    `tenant` (whose reply topic they go to)."""
    chunker = Chunker(
        request_id, length=max(tokens.count(text, model), 1), chunk_tokens=plan.chunk_tokens, model=model, cut=False
    )
    return [c.derive(ts=now, tenant=tenant) for c in chunker.feed(text) + chunker.finish()]


def streamed(decision: Decision) -> bool:
    """The decision's text went out as chunks already, cleaned while it was generated."""
    return decision.tier == "llm" and any(step.startswith("stream:") for step in decision.chain)
