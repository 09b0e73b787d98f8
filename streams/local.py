"""What the stage process answers where requests are admitted, without a topic hop: L1 hits and rule matches.

The cache agent reads `distilled` by cache-key partition and owns the same partitions of the L1 table. For a
work whose partition this worker holds actively (every partition, with one worker), ingest can answer it
itself: from the L1 table, or by the rules tier (zero tokens, the scoring engine's first tier, the same
function). The answer then skips one envelope encode, one produce, one fetch, Faust's per-message decode and
a hop of latency; a rule match also skips the L2 embedding and two more hops through a scoring worker. The
rest, and works whose partition another worker holds (or none yet, before the first assignment), go on to
the cache agent as before, which also tries L2, then to the scoring workers."""
from __future__ import annotations

import asyncio
from typing import Awaitable

from schemas.records import Work
from streams.metrics import observe_cache
from streams.wire import partition_for
from streams.scoring.rule_tier import rule_decision


class LocalAnswers:
    def __init__(self, app, topics, partitions: int, stage, controls, postprocess, rules: list):
        self.app, self.topics, self.partitions, self.rules = app, topics, partitions, rules
        self.stage, self.controls, self.postprocess = stage, controls, postprocess

    def owned(self) -> set[int]:
        """The distilled partitions (and so L1 table partitions) this worker holds actively."""
        topic = self.topics.distilled.get_topic_name()
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic}

    def answer(self, work: Work, switches) -> tuple[Work, list[Work], list] | None:
        """(`work` answered here, the pre-answers an L1 hit queues for the scoring workers, the usage of a rule
        match), or None when neither answers it."""
        if switches["cache.l1"] and (hit := self.stage.lookup_exact(work, switches)) is not None:
            observe_cache(hit.level, True)
            return self.stage.answer(work, hit), self.stage.prefetches(work, switches), []
        if switches["score.rules"] and (ruled := rule_decision(self.rules, work)) is not None:
            work.decision, usage = ruled
            return work, [], usage
        return None

    def split(self, works: list[Work]) -> tuple[list[Work], Awaitable]:
        """The works still to go on to the cache agent, and the delivery of those answered here."""
        switches = self.controls.switches
        owned = self.owned()
        answered, onward, to_score, usage = [], [], [], []
        for work in works:
            done = self.answer(work, switches) if partition_for(work.cache_key, self.partitions) in owned else None
            if done is None:
                onward.append(work)
                continue
            answered.append(done[0])
            to_score.extend(done[1])
            usage.extend(done[2])
        to_score.extend(self.stage.refreshes())
        return onward, asyncio.gather(self.postprocess(answered), self.topics.send_usage(usage),
                                      self.topics.send_work(self.topics.score, to_score, key=lambda w: w.cache_key))
