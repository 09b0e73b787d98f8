"""cache: answer from L1 (exact, a Faust table) or L2 (semantic) through the postprocess step, or pass the miss on
to the scoring workers. Ingest answers the L1 hits on partitions this worker holds itself (streams.local).

The cache-state topic: every stage process reads it from its beginning and keeps following it (a group-less
consumer, like the control reader), so a process started after a crash, or one taking over another's
partitions, holds the same L2 entries, learned thresholds and L3 statistics as the process that wrote them.
Each message is {"origin": process id, "records": [...]} (changelog.py); a process skips its own messages."""
from __future__ import annotations

import asyncio
import logging
import uuid

import orjson
from aiokafka import AIOKafkaConsumer

from schemas.topics import name
from streams.kafka_tuning import back_off_when_idle
from streams.metrics import observe_cache
from streams.wire import take_work

STATE_FLUSH_S = 0.5
RECORDS_PER_MESSAGE = 200  # an L2 fill with its vector is ~2.5 kB
log = logging.getLogger("jev.cache_state")


def register(app, topics, settings, stage, controls, postprocess) -> None:
    if settings.cache_state_topic:
        state_log = app.jev_cache_state = CacheStateLog(settings.bootstrap, stage)

        @app.task
        async def follow_cache_state():
            await state_log.follow()

        @app.timer(interval=STATE_FLUSH_S)
        async def send_cache_state():
            messages = state_log.messages()
            if messages:
                await topics.records.send_values(name("cache_state"), [(0, m) for m in messages])

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


class CacheStateLog:
    def __init__(self, bootstrap: str, stage, poll_ms: int = 200):
        self.bootstrap, self.stage, self.poll_ms = bootstrap, stage, poll_ms
        self.origin = uuid.uuid4().hex
        self.applied = 0  # records applied from other processes
        self.stopping = asyncio.Event()

    def messages(self) -> list[bytes]:
        """The stage's pending changes as topic messages."""
        changes = self.stage.take_changes()
        return [orjson.dumps({"origin": self.origin, "records": changes[i:i + RECORDS_PER_MESSAGE]})
                for i in range(0, len(changes), RECORDS_PER_MESSAGE)]

    def apply(self, value: bytes) -> None:
        message = orjson.loads(value)
        if message.get("origin") != self.origin:
            self.stage.restore(message["records"])
            self.applied += len(message["records"])

    async def follow(self) -> None:
        consumer = AIOKafkaConsumer(name("cache_state"), bootstrap_servers=self.bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        back_off_when_idle(consumer)
        try:
            while not self.stopping.is_set():
                for msgs in (await consumer.getmany(timeout_ms=self.poll_ms)).values():
                    for msg in msgs:
                        try:
                            self.apply(msg.value)
                        except Exception as exc:  # a bad record must not stop the stage
                            log.warning("skipping malformed cache-state message at offset %s: %s", msg.offset, exc)
        finally:
            await consumer.stop()
