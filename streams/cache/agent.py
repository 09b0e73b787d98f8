"""cache: answer from L1 (exact, a Faust table) or L2 (semantic) through the postprocess step, or pass the miss on
to the scoring workers. Ingest answers the L1 hits on partitions this worker holds itself (streams.local)."""
from __future__ import annotations

import asyncio

from streams.metrics import observe_cache, observe_stages
from streams.wire import take_work


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
            looks_exact = controls.switches["cache.l1"]
            for i, work in enumerate(works):
                hit = found[i] or semantic.get(i)
                if looks_exact:
                    observe_cache(found[i].level if found[i] else "l1", found[i] is not None)
                if i in asking:
                    observe_cache(semantic[i].level if i in semantic else "l2", i in semantic)
                if hit is None:
                    misses.append(work)
                elif i in semantic:
                    hits.append(stage.answer(work, hit))
                misses.extend(stage.prefetches(work, controls.switches))
            misses.extend(stage.refreshes())
            observe_stages("cache", works)
            await asyncio.gather(*delivering, topics.send_work(topics.score, misses, key=lambda w: w.cache_key),
                                 postprocess(hits))
