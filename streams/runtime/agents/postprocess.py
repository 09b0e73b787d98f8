"""postprocess: build the caller's Decision, route flagged output to review, fill the caches."""

from __future__ import annotations

import time

from streams.core.metrics import observe_decision, observe_promotion, observe_stages
from streams.core.outbox import Outbox
from streams.idempotency.requests import reservation_key
from streams.output import stream as stream_config
from streams.output.format import http_headers
from streams.output.stream import chunk_text, streamed
from streams.postprocess.finalize import finalize
from streams.runtime.consumer import run_agent, take_work
from streams.shadow.verdict import ShadowJoin, verdict_records
from streams.usage.events import usage_event

CACHEABLE = {"rules", "coarse", "fine", "llm"}


class Postprocess:
    """The stage's step on a list of decided Work: run by its own agent on what the scoring workers decided,
    by the cache agent on its hits, and by ingest on the L1 hits and rule matches it answers (streams.runtime.local;
    same process, same cache-key partition), so none of those takes another topic hop. It fills the caches and
    settles budget reservations, pairs shadow decisions into verdicts and gives the cache the naive twins of
    its near-misses to judge (promotion); what it wants sent (decisions, review, usage, alerts, verdicts, and
    the chunks of a streamed request answered without generating) it returns."""

    def __init__(self, settings, cache, controls, book, requests=None):
        self.settings, self.cache, self.controls, self.book = settings, cache, controls, book
        self.shadow = ShadowJoin(settings.shadow_text_agree, cache.learn)
        self.requests = requests  # ingest's idempotency state: a redelivered request gets this decision again
        self.leases = None  # a streams.budgets LeaseClient: settles hard budgets wherever the decision completes

    def __call__(self, items: list) -> Outbox:
        controls = self.controls
        out = Outbox()
        usage, verdicts = out.usage, []
        for work in items:
            if work.shadow == "naive":  # a naive twin's decision: only ever judged against its served one
                verdicts.append(self.shadow.naive(work))
                continue
            if work.shadow == "promote":  # a near-miss's naive twin: promoted if its L2 candidate's answer agrees
                observe_promotion(self.cache.promote(work, lambda cached, twin=work: self.shadow.agrees(twin, cached)))
                continue
            first = (
                self.requests.first(work.request.tenant, work.request.request_id)
                if self.requests is not None and not work.refresh and not work.predictive
                else None
            )
            if first is not None:  # decided before (its work read again after a restart): settled and metered
                first = first.derive(tenant=work.request.tenant)
                out.decisions.append((first, http_headers(first)))  # then; sent again, the same, in case it was lost
                continue
            done = finalize(work, config=self.settings.postprocess_patterns or None, switches=controls.switches)
            decision = done.decision.derive(tenant=work.request.tenant)
            usage.extend(done.usage)
            if work.shadow == "served" and not work.refresh:
                verdicts.append(self.shadow.served(work, done.usage))
            if not work.refresh and not work.predictive:  # a refill or an L3 pre-answer is no decision
                observe_decision(decision, work.request.decision_type)
            reservation = self.book.open.get(reservation_key(work.request.tenant, decision.request_id))
            if reservation is not None:
                out.alerts += self.book.settle(
                    reservation, decision.input_tokens + decision.output_tokens, decision.cost
                )
            if decision.tier.startswith("cache"):
                usage.append(
                    usage_event(
                        work.request,
                        "cache",
                        section=decision.tier,
                        nominal_tokens=decision.nominal_tokens,
                        outcome="hit",
                    )
                )
            if done.review:
                out.review.append(decision)
                continue
            if decision.tier in CACHEABLE and done.cacheable:
                self.cache.fill(work, decision, controls.switches)
            if not work.refresh:
                out.decisions.append((decision, http_headers(decision)))
                if self.requests is not None:
                    out.records.append(self.requests.decided(work.request.tenant, decision))
                if work.request.stream and not streamed(decision):  # answered without generating: one go
                    plan = stream_config.load(self.settings.stream_config).plan(work.request)
                    out.chunks += chunk_text(
                        decision.request_id, decision.text, plan, work.model, time.time(), work.request.tenant
                    )
        out.records += verdict_records(v for v in verdicts if v is not None)
        if self.leases is not None:
            out.placed += [("budget", partition, value) for partition, value in self.leases.settlements(items)]
        observe_stages("postprocess", decisions_of(items))
        return out


def decisions_of(items: list) -> list:
    """The works that answer a request (not a stale entry's refresh or an L3 pre-answer)."""
    return [work for work in items if not work.refresh and not work.predictive]


def register(app, topics, settings, postprocess: Postprocess, sender) -> None:
    @app.agent(topics.scored, name="format_decision")
    async def format_decision(stream):
        seen = getattr(app, "jev_requests_seen", None)
        if seen is not None:  # what was decided before this process started, so it is not decided again
            await seen.wait_loaded(stream)
        await run_agent(take_work(stream, settings), postprocess, sender)
