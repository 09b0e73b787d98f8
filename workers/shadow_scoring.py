"""The scoring worker's shadow side: decides naive twins (streams.shadow.naive) only while no served batch
is being decided, so shadow work never holds a served decision, and drops twins older than
JEV_SHADOW_MAX_AGE_MS (the first work dropped under load). Decided twins go to the scored topic on their
cache-key partition, where the stage process pairs them with their served decisions; their tokens are
metered as stage "shadow"; each dropped twin leaves a usage row (shadow;dropped) so a sample can be
accounted for."""
from __future__ import annotations

import asyncio
import contextlib
import time

from schemas.records import UsageBatch, Work
from schemas.topics import name
from streams.shadow.naive import decide_naive, naive_engine
from streams.usage.events import usage_event
from streams.wire import BatchConsumer, encode_batches

CHUNK = 4  # naive twins decided between two checks for served work


class ShadowScorer:
    def __init__(self, settings, engine, producer_ref, decode):
        self.settings, self.producer_ref, self.decode = settings, producer_ref, decode
        self.engine = naive_engine(engine)
        self.serving = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.decided = self.dropped = 0

    @contextlib.contextmanager
    def served_batch(self):
        """Wrap the deciding of a served micro-batch: shadow work waits while one runs."""
        self.serving += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.serving -= 1
            if not self.serving:
                self.idle.set()

    def consumer(self) -> BatchConsumer:
        s = self.settings
        return BatchConsumer(s.bootstrap, name("shadow"), s.shadow_group, self.handle, s.score_batch_max,
                             s.score_batch_wait_ms)

    async def handle(self, messages: list) -> None:
        producer = self.producer_ref()
        sends, by_partition = [], {}
        for msg in messages:
            batch = self.decode(msg.value)
            if not hasattr(batch, "items"):  # a poison message: dead-lettered like the score topic's
                sends.append(await producer.send(name("rejected"), batch.dumps()))
                continue
            by_partition.setdefault(msg.partition, []).extend(batch.items)
        for partition, works in by_partition.items():
            for i in range(0, len(works), CHUNK):
                await self.until_idle()
                fresh, usage = self.drop_stale(works[i:i + CHUNK])
                if fresh:
                    decided, shadow_usage = await asyncio.to_thread(decide_naive, self.engine, fresh)
                    usage += shadow_usage
                    sends += [await producer.send(name("scored"), envelope, partition=partition)
                              for envelope in encode_batches(decided)]
                    self.decided += len(decided)
                if usage:
                    sends.append(await producer.send(name("usage"), UsageBatch(events=usage).dumps()))
        await asyncio.gather(*sends)

    async def until_idle(self) -> None:
        """Until no served batch is being decided, or at most the twins' maximum age (by then the waiting
        twins are stale and dropped: the handler never stalls past the consumer's poll interval)."""
        try:
            await asyncio.wait_for(self.idle.wait(), self.settings.shadow_max_age_ms / 1000)
        except asyncio.TimeoutError:
            pass

    def drop_stale(self, works: list[Work]) -> tuple[list[Work], list]:
        limit = time.time() - self.settings.shadow_max_age_ms / 1000
        fresh = [w for w in works if w.admitted_at >= limit]
        usage = [usage_event(w.request, "shadow", section="dropped", outcome="dropped:age")
                 for w in works if w.admitted_at < limit]
        self.dropped += len(usage)
        return fresh, usage
