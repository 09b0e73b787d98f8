"""cache: answer from L1 (exact, a Faust table) or L2 (semantic) through the postprocess step, or pass the miss on
to the scoring workers."""
from __future__ import annotations

import asyncio

from streams.metrics import observe_cache
from streams.wire import take_work


def register(app, topics, settings, stage, controls, postprocess) -> None:
    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        async for works in take_work(stream, settings):
            found = {i: stage.lookup_exact(w, controls.switches) for i, w in enumerate(works)}
            asking = [i for i, w in enumerate(works) if found[i] is None and stage.wants_semantic(w, controls.switches)]
            if asking:
                vectors = await asyncio.to_thread(stage.embed, [works[i] for i in asking])
                for i, vector in zip(asking, vectors):
                    found[i] = stage.lookup_semantic(works[i], vector)
            hits, misses = [], []
            for i, work in enumerate(works):
                hit = found[i]
                observe_cache(hit.level if hit else "miss", hit is not None)
                if hit is None:
                    misses.append(work)
                else:
                    hits.append(stage.answer(work, hit))
                misses.extend(stage.prefetches(work, controls.switches))
            misses.extend(stage.refreshes())
            await topics.send_work(topics.score, misses, key=lambda w: w.cache_key)
            if hits:
                await postprocess(hits)
