"""A generate request (no candidates): the generator (streams/backends/) answers from the distilled context
within max_output_tokens, metered like any model call."""
from __future__ import annotations

import time

from schemas.records import Decision, UsageEvent, Work
from streams.backends.protocol import Scored
from streams.scoring.ledger import Ledger


def generated_decision(generator, work: Work, start: float) -> tuple[Decision, list[UsageEvent]]:
    req = work.request
    ledger = Ledger()
    out = generator.generate(work.context, req.contracts.max_output_tokens)
    ledger.add("generate", work.context_tokens + out.output_tokens, out.model,
               Scored([], out.input_tokens, 0, out.output_tokens))
    input_tokens, cache_read, output, cost = ledger.totals()
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(request_id=req.request_id, tier="llm", text=out.text, confidence=0.0,
                        chain=[f"generate:{generator.name}:{out.label}"], input_tokens=input_tokens,
                        cache_read_tokens=cache_read, output_tokens=output,
                        nominal_tokens=work.context_tokens + out.output_tokens, cost=cost, latency_ms=latency)
    return decision, ledger.events(req, latency, "ok", 1)
