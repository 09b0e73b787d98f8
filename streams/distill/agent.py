"""distill: shrink the context under its budget (pass-through accounting until the layers land)."""
from __future__ import annotations

from streams.cache.exact import cache_key


def register(app, topics, settings) -> None:
    @app.agent(topics.admitted, name="distill_context")
    async def distill_context(stream):
        async for batch in stream:
            works = batch.items
            for work in works:
                work.cache_key = cache_key(work)
            await topics.send_work(topics.distilled, works, key=lambda w: w.cache_key)
