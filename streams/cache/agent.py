"""cache: answer locally (L1, then rules: streams.answer), else from L2 (semantic), through the postprocess step,
or pass the miss on to the scoring workers. Ingest takes the same local step for the partitions this worker
holds (streams.local), so what arrives here is mostly the rest."""
from __future__ import annotations

import asyncio

from streams.answer import answer_locally
from streams.consumer import run_agent, take_work
from streams.metrics import observe_cache, observe_stages
from streams.outbox import Outbox


def register(app, topics, settings, stage, controls, postprocess, rules: list, sender) -> None:
    async def lookup(works: list) -> Outbox:
        """One micro-batch of distilled works: what it sends (answers, usage, misses and pre-answers to score)."""
        switches = controls.switches
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
            semantic = {id(work): hit for work, vector in zip(asking, vectors)
                        if (hit := stage.lookup_semantic(work, vector)) is not None}
        hits = []
        asked = {id(work) for work in asking}
        for work in rest:
            hit = semantic.get(id(work))
            if id(work) in asked:
                observe_cache(hit.level if hit else "l2", hit is not None)
            if hit is None:
                misses.append(work)
            else:
                hits.append(stage.answer(work, hit))
            misses.extend(stage.prefetches(work, switches))
        misses.extend(stage.refreshes())
        observe_stages("cache", works)
        return out.extend(postprocess(hits)).send_work("score", misses)

    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        await run_agent(take_work(stream, settings), lookup, sender)
