"""Usage events, the metering spine: the one place a UsageEvent is made (one per stage per request, with an
idempotency key, its flame-graph stack and its cost)."""

from __future__ import annotations

import time

from schemas.records import BILLED, SERVER_BILLED, Request, UsageEvent
from streams.core.tenants import request_key
from streams.models import pricing

# Every field's default, from the record's own decoder: an event is these, updated with what was measured.
# Three to five events are made per request, so this skips the decoder's per-field pass (all fields are scalars).
_DEFAULTS = UsageEvent.from_data(
    {
        "event_id": "",
        "request_id": "",
        "ts": 0.0,
        "tenant": "",
        "service": "",
        "business_line": "",
        "session_id": "",
        "user_id": "",
        "decision_type": "",
        "stage": "",
        "stack": "",
    }
).__dict__


def usage_event(request: Request, stage: str, *, section: str = "", **fields) -> UsageEvent:
    """The event of `stage` (and `section`, when a stage reports several) for `request`; `fields` are the
    UsageEvent's measured fields (model, token counts, latency_ms, outcome, …)."""
    return event(
        {
            "request_id": request.request_id,
            "ts": time.time(),
            "tenant": request.tenant,
            "service": request.service,
            "business_line": request.business_line,
            "session_id": request.session_id,
            "user_id": request.user_id,
            "decision_type": request.decision_type,
            "business_event": request.business_event,
        },
        stage,
        section,
        **fields,
    )


def event(
    who: dict,
    stage: str,
    section: str = "",
    *,
    model: str = "",
    input_tokens: int = 0,
    cache_read_tokens: int = 0,
    output_tokens: int = 0,
    outcome: str = "ok",
    **measured,
) -> UsageEvent:
    """A UsageEvent from `who` (request_id, ts, tenant, service, business_line, session_id, user_id,
    decision_type, business_event) and what was `measured` (nominal_tokens, latency_ms, candidates, the server's
    counts, …). Its cost is priced on the server's count where it has one, else on Jev's.
    event_id = event_key(tenant, request_id, stage, section), so a redelivered stage re-emits the same key and the
    sink stores it once, and one tenant's event never shares a key with (and is never dropped as a duplicate of)
    another tenant's."""
    unknown = measured.keys() - _DEFAULTS.keys()
    if unknown:
        raise TypeError(f"UsageEvent has no field {', '.join(sorted(unknown))}")
    record = UsageEvent.__new__(UsageEvent)
    fields = record.__dict__
    fields.update(_DEFAULTS)
    fields.update(who)
    fields.update(measured)
    fields.update(
        event_id=event_key(who["tenant"], who["request_id"], stage, section),
        stage=stage,
        stack=";".join(p for p in (who["tenant"], who["service"], who["decision_type"], stage, section) if p),
        model=model,
        input_tokens=input_tokens,
        cache_read_tokens=cache_read_tokens,
        output_tokens=output_tokens,
        outcome=outcome,
    )
    settled = (fields[name] for name in (SERVER_BILLED if fields["count_source"] != "jev" else BILLED))
    fields["cost"] = pricing.cost(model, *settled)  # the server's count where there is one: it is the bill
    return record


def event_key(tenant: str, request_id: str, stage: str, section: str = "") -> str:
    """A usage event's idempotency key, `<len>:tenant/<len>:request_id:stage[:section]`: the request's key
    (streams.core.tenants.request_key, length-prefixed), so no two (tenant, request, stage, section) share one: tenant
    `acme/coll` with request `r1` never meets tenant `acme` with request `coll/r1`."""
    key = f"{request_key(tenant, request_id)}:{stage}"
    return f"{key}:{section}" if section else key


def section_of(event_id: str) -> str:
    """The section of an event key (what follows its stage), "" when it has none."""
    tenant_length, _, rest = event_id.partition(":")
    rest = rest[int(tenant_length) + 1 :] if tenant_length.isdigit() else rest  # past "tenant/"
    request_length, _, rest = rest.partition(":")
    rest = rest[int(request_length) + 1 :] if request_length.isdigit() else rest  # past "request_id:"
    return rest.partition(":")[2]
