"""cache: answer from L1 (exact, a Faust table) or L2 (semantic) through the postprocess step, or pass the miss on
to the scoring workers. LocalHits answers L1 hits already where requests are admitted, when this worker owns
the hit's cache-key partition."""
from __future__ import annotations

import asyncio
from typing import Awaitable

from schemas.records import Work
from streams.metrics import observe_cache
from streams.wire import partition_for, take_work


class LocalHits:
    """L1 hits answered inside the ingest agent, without the distilled topic between them.

    The cache agent reads `distilled` by cache-key partition and owns the same partitions of the L1 table. Where
    this worker holds a work's partition actively (always, with one worker), ingest can read the table itself:
    a hit then skips one envelope encode, one produce, one fetch, Faust's per-message decode and a hop of
    latency. Misses, and works whose partition another worker owns (or none yet, before the first
    assignment), go on to the cache agent as before, which also tries L2."""

    def __init__(self, app, topics, partitions: int, stage, controls, postprocess):
        self.app, self.topics, self.partitions = app, topics, partitions
        self.stage, self.controls, self.postprocess = stage, controls, postprocess

    def owned(self) -> set[int]:
        """The distilled partitions (and so L1 table partitions) this worker holds actively."""
        topic = self.topics.distilled.get_topic_name()
        return {tp.partition for tp in self.app.assignor.assigned_actives() if tp.topic == topic}

    def split(self, works: list[Work]) -> tuple[list[Work], Awaitable]:
        """The works still to be looked up by the cache agent, and the delivery of the hits answered here (with
        the pre-answers and refreshes they queued for the scoring workers)."""
        switches = self.controls.switches
        owned = self.owned() if switches["cache.l1"] else set()
        if not owned:
            return works, asyncio.sleep(0)
        hits, onward, to_score = [], [], []
        for work in works:
            hit = None
            if partition_for(work.cache_key, self.partitions) in owned:
                hit = self.stage.lookup_exact(work, switches)
            if hit is None:
                onward.append(work)
                continue
            observe_cache(hit.level, True)
            hits.append(self.stage.answer(work, hit))
            to_score.extend(self.stage.prefetches(work, switches))
        to_score.extend(self.stage.refreshes())
        return onward, asyncio.gather(self.postprocess(hits),
                                      self.topics.send_work(self.topics.score, to_score, key=lambda w: w.cache_key))


def register(app, topics, settings, stage, controls, postprocess) -> None:
    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        async for works in take_work(stream, settings):
            found = [stage.lookup_exact(w, controls.switches) for w in works]
            exact = [stage.answer(w, hit) for w, hit in zip(works, found) if hit is not None]
            # exact hits go out while the misses beside them are embedded; every delivery is awaited below,
            # before this micro-batch is acknowledged
            delivering = [asyncio.ensure_future(postprocess(exact))] if exact else []
            asking = [i for i, w in enumerate(works) if found[i] is None and stage.wants_semantic(w, controls.switches)]
            semantic = {}
            if asking:
                vectors = await asyncio.to_thread(stage.embed, [works[i] for i in asking])
                semantic = {i: hit for i, vector in zip(asking, vectors)
                            if (hit := stage.lookup_semantic(works[i], vector)) is not None}
            hits, misses = [], []
            for i, work in enumerate(works):
                hit = found[i] or semantic.get(i)
                observe_cache(hit.level if hit else "miss", hit is not None)
                if hit is None:
                    misses.append(work)
                elif i in semantic:
                    hits.append(stage.answer(work, hit))
                misses.extend(stage.prefetches(work, controls.switches))
            misses.extend(stage.refreshes())
            await asyncio.gather(*delivering, topics.send_work(topics.score, misses, key=lambda w: w.cache_key),
                                 postprocess(hits))
