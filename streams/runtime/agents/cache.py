"""cache: answer locally (L1, then rules: streams.runtime.local), else from L2 through the postprocess step, or pass
the miss on to the scoring workers. Ingest takes the same local step for the partitions this worker holds
(streams.runtime.local), so what arrives here is mostly the rest.

Every stage process follows the cache-state topic from its beginning (a group-less consumer), so it holds the same
L2 entries, thresholds and L3 statistics as the processes that wrote them; its own changes go out through the one
Sender every STATE_FLUSH_S. Naive twins of near-misses (promotion) go to the shadow topic with the batch's misses.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import faust
import orjson

from schemas.topics import name
from streams.cache.stage import CacheStage
from streams.core.deadlines import deadline_first
from streams.core.metrics import observe_cache, observe_promoted_hit, observe_stages
from streams.core.outbox import Delivers, Outbox
from streams.core.switches import Controls
from streams.postprocess.stage import Postprocess
from streams.runtime.consumer import follow_from_start, run_agent, take_work
from streams.runtime.local import answer_locally
from streams.runtime.seen_log import RequestsSeenLog
from streams.runtime.topics import Topics
from streams.scoring.rules import Rule
from streams.settings import Settings

STATE_FLUSH_S = 0.5
RECORDS_PER_MESSAGE = 200  # an L2 fill with its vector is ~2.5 kB


def register(
    app: faust.App,
    topics: Topics,
    settings: Settings,
    stage: CacheStage,
    controls: Controls,
    postprocess: Postprocess,
    rules: list[Rule],
    sender: Delivers,
    seen: RequestsSeenLog,
) -> CacheStateLog | None:
    """The lookup_cache agent; with JEV_CACHE_STATE_TOPIC, the cache-state log it follows and sends (returned)."""
    state_log: CacheStateLog | None = None
    if settings.cache_state_topic:
        state_log = log = CacheStateLog(settings.bootstrap, stage)

        @app.task
        async def follow_cache_state():
            await log.follow()

        @app.timer(interval=STATE_FLUSH_S)
        async def send_cache_state():
            await sender.deliver(log.outbox())

    async def lookup(works: list) -> Outbox:
        """One micro-batch of distilled works: what it sends (answers, usage, misses, pre-answers and refreshes to
        score). The works whose caller set a deadline are looked up first (streams.core.deadlines) and what they send
        goes at once: a checkout screening does not wait for the L2 embedding of the rest of the batch."""
        parts = [[works[i] for i in part] for part in deadline_first(works)]
        for part in parts[:-1]:
            await sender.deliver(await look(part))
        out = (await look(parts[-1]) if parts else Outbox()).send_work("score", stage.refreshes())
        observe_stages("cache", works)
        return out

    async def look(works: list) -> Outbox:
        """The works answered (L1, rules, L2) through postprocess, and the misses and pre-answers to score."""
        switches = controls.switches
        began = time.time()  # the start of this work (an L2 hit's queue_ms ends here)
        answered, rest = [], []
        for work in works:
            if (done := answer_locally(work, switches, stage, rules)) is None:
                if switches["cache.l1"]:  # a miss keeps the level it missed in
                    observe_cache("l1", False)
                rest.append(work)
            else:
                answered.append(done)
        out = postprocess([done.work for done in answered])
        out.usage += [event for done in answered for event in done.usage]
        misses = [work for done in answered for work in done.prefetches]
        asking = [work for work in rest if stage.wants_semantic(work, switches)]
        semantic = {}
        if asking:
            vectors = await asyncio.to_thread(stage.embed, asking)
            semantic = {
                id(work): hit
                for work, vector in zip(asking, vectors)
                if (hit := stage.lookup_semantic(work, vector)) is not None
            }
        hits = []
        asked = {id(work) for work in asking}
        for work in rest:
            hit = semantic.get(id(work))
            if id(work) in asked:
                observe_cache(hit.level if hit else "l2", hit is not None)
                if hit is not None and hit.entry.alias_of:
                    observe_promoted_hit()
            if hit is None:
                misses.append(work)
            else:
                hits.append(stage.answer(work, hit))
                work.decision.queue_ms = round(max(0.0, began - work.admitted_at) * 1000, 3)
            misses.extend(stage.prefetches(work, switches))
        return out.extend(postprocess(hits)).send_work("score", misses).send_work("shadow", stage.judge_twins())

    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        await seen.wait_loaded(stream)  # what was decided before this process started: a hit does not decide it again
        await run_agent(take_work(stream, settings), lookup, sender)

    return state_log


class CacheStateLog:
    def __init__(self, bootstrap: str, stage, poll_ms: int = 200):
        self.bootstrap, self.stage, self.poll_ms = bootstrap, stage, poll_ms
        self.origin = uuid.uuid4().hex
        self.applied = 0  # records applied from other processes
        self.stopping = asyncio.Event()

    def messages(self) -> list[bytes]:
        """The stage's pending changes as topic messages."""
        changes = self.stage.take_changes()
        return [
            orjson.dumps({"origin": self.origin, "records": changes[i : i + RECORDS_PER_MESSAGE]})
            for i in range(0, len(changes), RECORDS_PER_MESSAGE)
        ]

    def outbox(self) -> Outbox:
        """The pending changes as cache-state records for the Sender (empty: nothing to send)."""
        key = self.origin.encode()
        return Outbox(records=[("cache_state", key, message) for message in self.messages()])

    def apply(self, value: bytes) -> None:
        message = orjson.loads(value)
        if message.get("origin") != self.origin:
            self.stage.restore(message["records"])
            self.applied += len(message["records"])

    async def follow(self) -> None:
        await follow_from_start(
            self.bootstrap, name("cache_state"), self.apply, self.stopping, self.poll_ms, "cache-state message"
        )
