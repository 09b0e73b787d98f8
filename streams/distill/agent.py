"""distill: shrink each request's history under its token budget, then key it for the cache."""
from __future__ import annotations

import functools
import time

from streams.cache.exact import cache_key
from streams.distill import distill_work, load_policy
from streams.wire import take_work


def register(app, topics, settings, controls) -> None:
    policy_for = functools.lru_cache(maxsize=256)(lambda decision_type: load_policy(decision_type,
                                                                                     settings.distill_policies))

    @app.agent(topics.admitted, name="distill_context")
    async def distill_context(stream):
        async for items in take_work(stream, settings):
            works, usage = [], []
            now = time.time()
            for work in items:
                work, events = distill_work(work, policy_for(work.request.decision_type), controls.switches, now)
                work.cache_key = cache_key(work)
                work.request = work.request.derive(history=[])  # the distilled context carries it from here
                works.append(work)
                usage.extend(events)
            await topics.send_work(topics.distilled, works, key=lambda w: w.cache_key)
            await topics.send_usage(usage)
