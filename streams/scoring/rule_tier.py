"""The rules tier as an entry of its own: zero tokens, the first tier the engine tries, and the one the stage
process tries before a work would leave it for the scoring workers (streams.runtime.local.LocalAnswers)."""

from __future__ import annotations

import time

from schemas.records import Decision, Ranked, UsageEvent, Work
from streams.scoring import rules as rules_mod
from streams.scoring.ledger import Ledger, candidate_lengths, nominal_tokens


def rule_decision(rules: list, work: Work) -> tuple[Decision, list[UsageEvent]] | None:
    """The decision and usage of the first rule that matches, or None. No rollout, shadow or exploration
    applies to a rule."""
    start = time.perf_counter()
    req = work.request
    ids = [c.id for c in req.candidates]
    rule = rules_mod.match(rules, req.decision_type, req.state, ids)
    if rule is None:
        return None
    nominal, ledger = nominal_tokens(work, candidate_lengths(work)), Ledger()
    ledger.add("rules", nominal, candidates=len(ids))
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(
        request_id=req.request_id,
        tier="rules",
        action_id=rule.action,
        ranking=[Ranked(id=rule.action, score=1.0)],
        confidence=1.0,
        chain=[f"rules:{rule.name}"],
        nominal_tokens=nominal,
        latency_ms=latency,
    )
    return decision, ledger.events(req, latency, "ok", 1)
