"""Usage events, the metering spine: the one place a UsageEvent is made (one per stage per request, with an
idempotency key, its flame-graph stack and its cost)."""
from __future__ import annotations

import time

from schemas.records import Request, UsageEvent
from streams import pricing


def usage_event(request: Request, stage: str, *, section: str = "", **fields) -> UsageEvent:
    """The event of `stage` (and `section`, when a stage reports several) for `request`; `fields` are the
    UsageEvent's measured fields (model, token counts, latency_ms, outcome, …)."""
    return event(dict(request_id=request.request_id, ts=time.time(), tenant=request.tenant,
                      service=request.service, business_line=request.business_line, session_id=request.session_id,
                      user_id=request.user_id, decision_type=request.decision_type,
                      business_event=request.business_event), stage, section, **fields)


def event(who: dict, stage: str, section: str = "", *, model: str = "", input_tokens: int = 0,
          cache_read_tokens: int = 0, output_tokens: int = 0, nominal_tokens: int = 0, latency_ms: float = 0.0,
          outcome: str = "ok", **extra) -> UsageEvent:
    """A UsageEvent from `who` (request_id, ts, tenant, service, business_line, session_id, user_id,
    decision_type, business_event). event_id = request_id:stage[:section], so a redelivered stage re-emits the
    same key and the sink stores it once."""
    stack = ";".join(p for p in (who["tenant"], who["service"], who["decision_type"], stage, section) if p)
    return UsageEvent.from_data(dict(  # the compiled decoder builds a record faster than Faust's __init__
        who, event_id=":".join(p for p in (who["request_id"], stage, section) if p), stage=stage, stack=stack,
        model=model, input_tokens=input_tokens, cache_read_tokens=cache_read_tokens, output_tokens=output_tokens,
        nominal_tokens=nominal_tokens, latency_ms=latency_ms,
        cost=pricing.cost(model, input_tokens, cache_read_tokens, output_tokens), outcome=outcome, **extra))
