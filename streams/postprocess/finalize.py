"""Turn a scored Work into the Decision the caller receives."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from schemas.records import Decision, UsageEvent, Work
from streams.usage.events import usage_event


@dataclass
class Finalized:
    decision: Decision
    review: bool = False  # True: route to the review topic instead of the caller
    usage: list[UsageEvent] = field(default_factory=list)


def finalize(work: Work, now: float | None = None) -> Finalized:
    now = time.time() if now is None else now
    decision = work.decision
    decision.latency_ms = round((now - work.admitted_at) * 1000, 3)
    return Finalized(decision, usage=[usage_event(work.request, "postprocess", latency_ms=decision.latency_ms,
                                                  outcome=decision.tier)])
