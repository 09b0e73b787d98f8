"""A generate request (no candidates): the generator (streams/models/) answers from the distilled context
within max_output_tokens, metered like any model call. With a router (streams/models/router.py) the request's
channel answers and the validator sends a low-confidence answer to the next channel up, both calls metered
(sections generate and escalation). A model that cannot answer gives a fallback decision (`fallback:<reason>`, no
text), never a lost request."""

from __future__ import annotations

import time

from schemas.records import Decision, UsageEvent, Work
from streams.core.metrics import observe_fallback
from streams.models.protocol import Generator, ModelUnavailable, Scored
from streams.models.router import Router, for_work
from streams.scoring.ledger import Ledger
from streams.scoring.policy import Policy


def generated_decision(
    generator: Generator, work: Work, start: float, pol: Policy | None = None
) -> tuple[Decision, list[UsageEvent]]:
    req = work.request
    chosen = for_work(generator, work)
    try:
        out = chosen.generate(work.context, req.contracts.max_output_tokens)
    except ModelUnavailable as exc:
        return unavailable(chosen, work, start, exc)
    ledger = Ledger()
    ledger.add("generate", work.context_tokens + out.output_tokens, out.model, metered(chosen, out))
    chain = [f"generate:{chosen.name}:{out.label}"]
    if (
        isinstance(generator, Router)
        and pol is not None
        and out.confidence is not None
        and out.confidence < pol.escalate_below
        and (channel := generator.escalation(work, generator.route(work))) is not None
    ):
        better = generator.channels[channel]
        chain.append(f"validate:{out.confidence:.3f}<{pol.escalate_below}")
        try:
            second = better.generate(work.context, req.contracts.max_output_tokens)
            ledger.add("escalation", 0, second.model, metered(better, second))
            out = second
            chain.append(f"escalation:{better.name}:{second.label}")
        except ModelUnavailable as exc:  # the first answer stands
            chain.append(f"escalation:{better.name}:{exc.reason}")
    input_tokens, cache_read, output, cost = ledger.totals()
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(
        request_id=req.request_id,
        tier="llm",
        text=out.text,
        confidence=out.confidence or 0.0,
        chain=chain,
        input_tokens=input_tokens,
        cache_read_tokens=cache_read,
        output_tokens=output,
        nominal_tokens=work.context_tokens + out.output_tokens,
        cost=cost,
        latency_ms=latency,
    )
    return decision, ledger.events(req, latency, "ok", 1)


def metered(generator, out) -> Scored:
    """A generation as the ledger takes it: a model server's call counts as one (its usage, or Jev's count)."""
    return Scored([], out.input_tokens, 0, out.output_tokens, out.server, int(getattr(generator, "remote", False)))


def unavailable(generator, work: Work, start: float, exc: ModelUnavailable) -> tuple[Decision, list[UsageEvent]]:
    """The generator's model could not answer: a fallback decision saying why, no model tokens."""
    req = work.request
    observe_fallback(exc.reason)
    ledger = Ledger()
    ledger.add("fallback", work.context_tokens)
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(
        request_id=req.request_id,
        tier="fallback",
        nominal_tokens=work.context_tokens,
        chain=[f"fallback:{exc.reason}", f"generate:{generator.name}"],
        error=f"model unavailable: {exc}",
        latency_ms=latency,
    )
    return decision, ledger.events(req, latency, "fallback", 1)
