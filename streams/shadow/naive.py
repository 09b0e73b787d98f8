"""The naive path: how a system without Jev's savings decides, for the shadow sample.

Full context (the twin carries it), no cache (the twin never meets one), the top configured tier only (the
escalation model when one is configured, else the fine tier, scoring every candidate), no rules, no cascade,
no multi-step descent, no breakers. Its tokens are metered as stage "shadow" with no nominal tokens: they
are the price of the measurement, never serving spend and never a saving.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from schemas.records import UsageEvent, Work
from streams.core.switches import SWITCHES
from streams.scoring import policy as policy_mod
from streams.shadow.mechanisms import section_of
from streams.usage.events import event_key

UNBOUNDED_MS = 1e12
UNBOUNDED_TOKENS = 10**12


def naive_policy(pol: policy_mod.Policy) -> policy_mod.Policy:
    """One flat decision over every candidate, no breakers, no rollout tricks."""
    return dataclasses.replace(
        pol,
        max_iterations=1,
        token_cap=UNBOUNDED_TOKENS,
        timeout_ms=UNBOUNDED_MS,
        escalate_below=0.0,
        shadow=False,
        rollout_percent=100.0,
        exploration=0.0,
    )


def naive_engine(engine):
    """A copy of the scoring engine that decides the naive way, sharing its loaded models."""
    config = engine.config
    naive_config = policy_mod.Config(
        tiers=config.tiers,
        default=naive_policy(config.default),
        policies={name: naive_policy(p) for name, p in config.policies.items()},
    )
    top = engine.escalation or engine.fine
    switches = {**dict.fromkeys(SWITCHES, True), "score.rules": False, "score.cascade": False}
    return dataclasses.replace(
        engine,
        fine=top,
        escalation=None,
        config=naive_config,
        rules=[],
        mode="fine-only",
        switches=switches,
        counters=Counter(),
        deadlines=False,
        fine_tiers=None if engine.escalation else engine.fine_tiers,
    )


def as_shadow(event: UsageEvent) -> UsageEvent:
    """A scoring usage event restaged as shadow work: own event id and stack, no nominal tokens."""
    section = section_of(event)
    stack = ";".join(p for p in (event.tenant, event.service, event.decision_type, "shadow", section) if p)
    return event.derive(
        event_id=event_key(event.tenant, event.request_id, "shadow", section),
        stage="shadow",
        stack=stack,
        nominal_tokens=0,
    )


def decide_naive(engine, works: list[Work]) -> tuple[list[Work], list[UsageEvent]]:
    """Decide naive twins with a naive engine: the works with their decisions, and the shadow usage."""
    usage: list[UsageEvent] = []
    for work, (decision, events) in zip(works, engine.decide_batch(works)):
        work.decision = decision
        usage.extend(as_shadow(e) for e in events)
    return works, usage
