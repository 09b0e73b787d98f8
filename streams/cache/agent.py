"""cache: answer from L1 (a Faust table keyed by cache key) or pass the miss on to the scoring workers."""
from __future__ import annotations

from schemas.records import Decision


def register(app, topics, settings, table, controls) -> None:
    @app.agent(topics.distilled, name="lookup_cache")
    async def lookup_cache(stream):
        async for batch in stream:
            hits, misses = [], []
            for work in batch.items:
                entry = table.get(work.cache_key) if controls.on("cache.l1") else None
                if entry is None:
                    misses.append(work)
                    continue
                cached = Decision.from_data(entry)
                work.decision = Decision(
                    request_id=work.request.request_id, tier="cache_l1", action_id=cached.action_id,
                    text=cached.text, ranking=cached.ranking, confidence=cached.confidence,
                    chain=["cache_l1", *cached.chain], nominal_tokens=cached.nominal_tokens)
                hits.append(work)
            await topics.send_work(topics.score, misses, key=lambda w: w.cache_key)
            await topics.send_work(topics.scored, hits, key=lambda w: w.cache_key)
