"""cache: answer from L1 (exact, a Faust table) or L2 (semantic), or pass the miss on to the scoring workers."""
from __future__ import annotations

import asyncio

from streams.metrics import observe_cache


def register(app, topics, settings, stage, controls) -> None:
    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        async for batch in stream:
            works = batch.items
            vectors = [None] * len(works)
            if stage.semantic is not None and controls.on("cache.l2") and works:
                vectors = await asyncio.to_thread(stage.embed, works)
            hits, misses = [], []
            for work, vector in zip(works, vectors):
                hit = stage.lookup(work, controls.switches, vector)
                if hit is None:
                    misses.append(work)
                else:
                    hits.append(stage.answer(work, hit))
                observe_cache(hit.level if hit else "miss", hit is not None)
                misses.extend(stage.prefetches(work, controls.switches))
            misses.extend(stage.refreshes())
            await topics.send_work(topics.score, misses, key=lambda w: w.cache_key)
            await topics.send_work(topics.scored, hits, key=lambda w: w.cache_key)
