"""The scoring engine's path for a generate request that asks for a stream: the generator's text, cleaned as it
comes, cut into Chunks by the client's size, paced by the response's token bucket and handed to the engine's chunk
sink; then the Decision with the totals and one usage row for the whole stream.

The row meters what was generated (the server's count where it sent one), with `delivered_tokens`, the sum of the
chunks, beside it. A sentence with a sensitive word is never sent: the stream ends there and the decision goes to
review. Pure given the engine's backends, sink, clock and sleep.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from schemas.records import Chunk, Decision, UsageEvent, Work
from streams.core.metrics import observe_stream
from streams.models.protocol import ModelUnavailable, Scored, Streaming
from streams.models.router import for_work
from streams.output import chunks as stream_mod
from streams.scoring.generate import unavailable
from streams.scoring.ledger import Ledger
from streams.text import tokens


@dataclass
class Clock:
    """Where a stream reads the time and waits: real by default, replaced in tests."""

    now: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            self.sleep(seconds)


def stream_answer(
    engine, work: Work, ledger: Ledger, start: float, clock: Clock | None = None
) -> tuple[Decision, list[UsageEvent]]:
    clock = clock or engine.clock
    req = work.request
    config = engine.stream_config or stream_mod.load()
    plan = config.plan(req)
    sink = engine.chunk_sink or (lambda chunk: None)
    switches = engine.switches
    cleaner = stream_mod.StreamCleaner(work.model, engine.patterns or None, enabled=switches["postprocess.cleanup"])
    chunker = stream_mod.Chunker(req.request_id, length=plan.length, chunk_tokens=plan.chunk_tokens, model=work.model)
    pacer = stream_mod.Pacer(plan.tokens_per_s, plan.chunk_tokens, clock.now())
    began = clock.now()
    sent: list[Chunk] = []
    first_wall = 0.0

    def release(chunks: list[Chunk]) -> None:
        nonlocal first_wall
        for chunk in chunks:
            clock.wait(pacer.wait(chunk.tokens, clock.now(), switches["postprocess.throttle"]))
            chunk = chunk.derive(ts=clock.wall(), tenant=req.tenant)
            first_wall = first_wall or chunk.ts
            sink(chunk)
            sent.append(chunk)

    def flagged(text: str) -> bool:
        return bool(text) and switches["postprocess.scan"] and bool(cleaner.patterns.scanner.scan(text))

    withheld = ""  # text with a sensitive word: never sent as a chunk; the decision goes to review
    generator = for_work(engine.generator, work)
    try:
        streaming = stream_of(generator, work.context, plan.length)
    except ModelUnavailable as exc:  # nothing was sent: the request gets a fallback decision saying why
        engine.counters[f"fallback_{exc.reason}"] += 1
        return unavailable(generator, work, start, exc)
    read: list[str] = []
    try:
        for piece in streaming:
            read.append(piece)
            text = cleaner.feed(piece)
            if flagged(text):
                withheld = text
                break
            release(chunker.feed(text))
            if chunker.full:
                break
    finally:
        streaming.close()
    if not withheld and not flagged(rest := cleaner.finish()):
        release(chunker.feed(rest))
    elif not withheld:
        withheld = rest
    release(chunker.finish())
    seconds = max(clock.now() - began, 1e-6)
    delivered = sum(c.tokens for c in sent)
    output = generated_tokens(streaming, "".join(read), work.model)
    text = "".join(c.text for c in sent) + withheld
    first_chunk_ms = round(max(0.0, first_wall - (work.admitted_at or first_wall)) * 1000, 3)
    tokens_per_s = round(delivered / seconds, 1)
    ledger.add(
        "stream",
        work.context_tokens + output,
        streaming.model,
        Scored([], streaming.input_tokens, 0, output, streaming.server, int(getattr(generator, "remote", False))),
    )
    input_tokens, cache_read, output_tokens, cost = ledger.totals()
    latency = round((time.perf_counter() - start) * 1000, 3)
    engine.counters["llm"] += 1
    engine.counters["streamed"] += 1
    observe_stream(plan.client, plan.question_type, first_chunk_ms, tokens_per_s, len(sent))
    decision = Decision(
        request_id=req.request_id,
        tier="llm",
        text=text,
        confidence=0.0,
        chain=[
            f"generate:{generator.name}:{streaming.label}",
            f"stream:{plan.client}:{plan.question_type}:{len(sent)}",
            *(["stream:withheld"] if withheld else []),
        ],
        input_tokens=input_tokens,
        cache_read_tokens=cache_read,
        output_tokens=output_tokens,
        nominal_tokens=work.context_tokens + output,
        cost=cost,
        latency_ms=latency,
    )
    events = [
        e.derive(first_chunk_ms=first_chunk_ms, tokens_per_s=tokens_per_s, delivered_tokens=delivered)
        for e in ledger.events(req, latency, "ok", 1)
    ]
    return decision, events


def generated_tokens(streaming: Streaming, read: str, request_model: str) -> int:
    """The output tokens a stream generated: the engine's count once the stream ended (a model server's own count
    where its stream carried one); from an engine that keeps none, the text read counted in the pool's tokenizer
    for the generator's model (the request model's when the pool names none)."""
    if streaming.output_tokens is not None:
        return streaming.output_tokens
    try:
        return tokens.count(read, streaming.model)
    except tokens.UnknownModel:
        return tokens.count(read, request_model)


def stream_of(generator, prompt: str, max_tokens: int):
    """The generator's stream; a generator without one streams its whole answer as one piece."""
    if hasattr(generator, "stream"):
        return generator.stream(prompt, max_tokens)
    out = generator.generate(prompt, max_tokens)
    return Streaming(iter([out.text]), out.input_tokens, out.model, out.label, out.server, out.output_tokens)
