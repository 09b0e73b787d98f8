"""The one step that answers a request without a model: an L1 exact hit, else a rule match (zero tokens, the
scoring engine's first tier, the same function). Whichever stage holds the work calls it: ingest for the
cache-key partitions its worker holds (streams.runtime.local), the cache agent for the rest, before L2."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from schemas.records import UsageEvent, Work
from streams.core.metrics import observe_cache
from streams.scoring.rule_tier import rule_decision


@dataclass
class Answered:
    work: Work  # with its decision set
    prefetches: list[Work] = field(default_factory=list)  # pre-answers an L1 hit queues for the scoring workers
    usage: list[UsageEvent] = field(default_factory=list)  # a rule match's usage (an L1 hit spends nothing)


def answer_locally(work: Work, switches, cache, rules: list) -> Answered | None:
    """`work` answered from L1 (`cache`, a streams.cache.stage.CacheStage) or by `rules`, or None."""
    queued_ms = (time.time() - work.admitted_at) * 1000  # the work that decides it starts now
    if switches["cache.l1"] and (hit := cache.lookup_exact(work, switches)) is not None:
        observe_cache(hit.level, True)
        answered = cache.answer(work, hit)
        answered.decision.queue_ms = round(queued_ms, 3)
        return Answered(answered, cache.prefetches(work, switches))
    if switches["score.rules"] and (ruled := rule_decision(rules, work)) is not None:
        if switches["cache.l1"]:  # looked up above and missed
            observe_cache("l1", False)
        work.decision, usage = ruled
        work.decision.queue_ms = round(queued_ms, 3)
        return Answered(work, usage=usage)
    return None
