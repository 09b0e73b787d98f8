"""Local answers where requests are admitted, without a topic hop: ingest answers the L1 hits and rule matches
(answer_locally: L1, then a rule) of the cache-key partitions this worker holds.

That skips an envelope, a produce, a fetch and a hop of latency (a rule match also skips the L2 embedding and a
scoring worker). The rest go on to the cache agent, which takes the same step before L2; a work with a deadline
that L2 and L3 cannot match (a structured state) goes straight to the scoring workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from schemas.records import UsageEvent, Work
from streams.cache.semantic import asks_in_words
from streams.core.deadlines import deadline
from streams.core.metrics import observe_cache
from streams.core.outbox import Outbox
from streams.runtime.partitioning import partition_for
from streams.scoring.rules import rule_decision


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


class LocalAnswers:
    def __init__(self, app, topics, partitions: int, stage, controls, postprocess, rules: list):
        self.app, self.topics, self.partitions, self.rules = app, topics, partitions, rules  # topics: Faust handles
        self.stage, self.controls, self.postprocess = stage, controls, postprocess

    def owned(self) -> set[int]:
        """The distilled partitions (and so L1 table partitions) this worker holds actively."""
        topic = self.topics.distilled.get_topic_name()
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic}

    def answer_owned(self, works: list[Work]) -> tuple[list[Work], Outbox]:
        """Answer the works of partitions this worker holds where they can be: the works still to go on to the
        cache agent, and what the rest send (decisions through postprocess, usage, the pre-answers and refreshes to
        score, and the works with a deadline that only the scoring workers can decide)."""
        switches = self.controls.switches
        owned = self.owned()
        answered, onward, to_score, usage = [], [], [], []
        for work in works:
            held = partition_for(work.cache_key, self.partitions) in owned
            done = answer_locally(work, switches, self.stage, self.rules) if held else None
            if done is None and held and deadline(work) and not asks_in_words(work.request):
                if switches["cache.l1"]:  # looked up and missed, as the cache agent counts it
                    observe_cache("l1", False)
                to_score.append(work)
                continue
            if done is None:
                onward.append(work)
                continue
            answered.append(done.work)
            to_score.extend(done.prefetches)
            usage.extend(done.usage)
        to_score.extend(self.stage.refreshes())
        out = self.postprocess(answered)
        out.usage += usage
        return onward, out.send_work("score", to_score)
