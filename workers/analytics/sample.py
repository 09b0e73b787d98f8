"""Synthetic usage: the events a decided request leaves behind, for tests and benchmarks.

Each request gets an ingest event, score events per mechanism (or one cache event on a hit) and a
postprocess event whose outcome is the tier that answered, the shape the stages emit.
"""

from __future__ import annotations

import random

from schemas.records import UsageEvent
from streams.usage.events import event

SERVICES = [
    ("supply-chain", "inventory_transfer", "retail", "transfer_order"),
    ("payments", "risk_interception", "fintech", "payment_screened"),
    ("search", "ranking", "marketplace", "search_session"),
    ("support", "customer_service", "care", "ticket_resolved"),
]
TIERS = ["rules", "cache_l1", "cache_l2", "coarse", "fine", "fine", "fine", "llm", "fallback"]
MODEL = "gpt-4o-mini"


def request_events(i: int, ts: float, rng: random.Random, tier: str | None = None) -> list[UsageEvent]:
    service, dtype, line, business_event = SERVICES[i % len(SERVICES)]
    session = f"s-{rng.randint(1, 50)}"
    base = dict(
        request_id=f"r-{i}",
        ts=ts,
        tenant=f"t{i % 2}",
        service=service,
        business_line=line,
        session_id=session,
        user_id=f"u-{session[2:]}",
        decision_type=dtype,
        business_event=business_event,
    )
    tier = tier or rng.choice(TIERS)
    context, candidates = rng.randint(100, 600), rng.randint(2, 12)
    nominal = candidates * (context + 20)
    events = [event(base, "ingest", model=MODEL, candidates=candidates, latency_ms=1.0)]
    if tier.startswith("cache"):
        events.append(event(base, "cache", tier, nominal_tokens=nominal, outcome="hit"))
    elif tier in ("rules", "fallback"):
        events.append(event(base, "score", tier, nominal_tokens=nominal, outcome=tier))
    else:
        kept = min(candidates, 3)
        events.append(
            event(
                base,
                "score",
                "cascade",
                model="minilm",
                input_tokens=nominal // 4,
                nominal_tokens=(candidates - kept) * (context + 20),
            )
        )
        events.append(
            event(
                base,
                "score",
                "fine",
                model=MODEL,
                input_tokens=context + 20 * kept,
                cache_read_tokens=context // 2,
                output_tokens=kept,
                nominal_tokens=kept * (context + 20),
                beam=kept,
            )
        )
        if tier == "llm":
            events.append(
                event(base, "score", "escalation", model="gpt-4o", input_tokens=context + 20 * kept, output_tokens=5)
            )
    events.append(event(base, "postprocess", model=MODEL, latency_ms=rng.uniform(5, 200), outcome=tier))
    return events


def usage_events(requests: int, start: float, span_s: float = 3600.0, seed: int = 7) -> list[UsageEvent]:
    """Events of `requests` decided requests spread evenly over [start, start + span_s)."""
    rng = random.Random(seed)
    out: list[UsageEvent] = []
    for i in range(requests):
        out.extend(request_events(i, start + span_s * i / max(1, requests), rng))
    return out
