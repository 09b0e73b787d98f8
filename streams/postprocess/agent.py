"""postprocess: build the caller's Decision, route flagged output to review, fill the caches."""
from __future__ import annotations

import asyncio
import time

from streams.metrics import observe_decision
from streams.postprocess.finalize import finalize
from streams.postprocess import stream as stream_config
from streams.postprocess.format import http_headers
from streams.postprocess.stream import chunk_text, streamed
from streams.usage.events import usage_event
from streams.wire import take_work

CACHEABLE = {"rules", "coarse", "fine", "llm"}


class Postprocess:
    """The stage's step on a list of decided Work: run by its own agent on what the scoring workers decided,
    by the cache agent on its hits, and by ingest on the L1 hits and rule matches it answers (streams.local;
    same process, same cache-key partition), so none of those takes another topic hop."""

    def __init__(self, topics, settings, cache, controls, book):
        self.topics, self.settings, self.cache, self.controls, self.book = topics, settings, cache, controls, book

    async def __call__(self, items: list) -> None:
        topics, controls = self.topics, self.controls
        usage, decisions, chunks = [], [], []
        for work in items:
            done = finalize(work, config=self.settings.postprocess_patterns or None, switches=controls.switches)
            decision = done.decision
            usage.extend(done.usage)
            observe_decision(decision, work.request.decision_type)
            reservation = self.book.open.get(decision.request_id)
            if reservation is not None:
                for alert in self.book.settle(reservation, decision.input_tokens + decision.output_tokens,
                                              decision.cost):
                    await topics.alerts.send(key=alert.scope, value=alert)
            if decision.tier.startswith("cache"):
                usage.append(usage_event(work.request, "cache", section=decision.tier,
                                         nominal_tokens=decision.nominal_tokens, outcome="hit"))
            if done.review:
                await topics.review.send(key=decision.request_id, value=decision)
                continue
            if decision.tier in CACHEABLE and done.cacheable:
                self.cache.fill(work, decision, controls.switches)
            if not work.refresh:
                decisions.append(decision)
                if work.request.stream and not streamed(decision):  # answered without generating: one go
                    plan = stream_config.load(self.settings.stream_config).plan(work.request)
                    chunks.extend(chunk_text(decision.request_id, decision.text, plan, work.model, time.time()))
        if chunks:  # before the decisions: a caller reads the chunks, then the totals
            await topics.records.send_all(topics.chunks.get_topic_name(), ((c.request_id, c, {}) for c in chunks))
        await asyncio.gather(topics.send_decisions(decisions, http_headers), topics.send_usage(usage))


def register(app, topics, settings, postprocess: Postprocess) -> None:
    @app.agent(topics.scored, name="format_decision")
    async def format_decision(stream):
        async for items in take_work(stream, settings):
            await postprocess(items)
