"""A generate request (no candidates): the generator (streams/backends/) answers from the distilled context
within max_output_tokens, metered like any model call. A model that cannot answer gives a fallback decision
(`fallback:model_unavailable`, no text), never a lost request."""
from __future__ import annotations

import time

from schemas.records import Decision, UsageEvent, Work
from streams.backends.protocol import ModelUnavailable, Scored
from streams.metrics import observe_fallback
from streams.scoring.ledger import Ledger


def generated_decision(generator, work: Work, start: float) -> tuple[Decision, list[UsageEvent]]:
    req = work.request
    try:
        out = generator.generate(work.context, req.contracts.max_output_tokens)
    except ModelUnavailable as exc:
        return unavailable(generator, work, start, exc)
    ledger = Ledger()
    ledger.add("generate", work.context_tokens + out.output_tokens, out.model,
               Scored([], out.input_tokens, 0, out.output_tokens, out.server, int(getattr(generator, "remote", False))))
    input_tokens, cache_read, output, cost = ledger.totals()
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(request_id=req.request_id, tier="llm", text=out.text, confidence=0.0,
                        chain=[f"generate:{generator.name}:{out.label}"], input_tokens=input_tokens,
                        cache_read_tokens=cache_read, output_tokens=output,
                        nominal_tokens=work.context_tokens + out.output_tokens, cost=cost, latency_ms=latency)
    return decision, ledger.events(req, latency, "ok", 1)


def unavailable(generator, work: Work, start: float, exc: ModelUnavailable) -> tuple[Decision, list[UsageEvent]]:
    """The generator's model could not answer: a fallback decision saying why, no model tokens."""
    req = work.request
    observe_fallback(exc.reason)
    ledger = Ledger()
    ledger.add("fallback", work.context_tokens)
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(request_id=req.request_id, tier="fallback", nominal_tokens=work.context_tokens,
                        chain=[f"fallback:{exc.reason}", f"generate:{generator.name}"],
                        error=f"model unavailable: {exc}", latency_ms=latency)
    return decision, ledger.events(req, latency, "fallback", 1)
