"""The postprocess stage: a micro-batch of decided Work in, the Outbox of what it sends out. It builds the caller's
Decision (finalize), routes flagged output to review, fills the caches, settles budget reservations and pairs shadow
decisions into verdicts. What it works with from other stages (the cache stage, the shadow join, the lease client)
it is handed by the runtime as the Protocols below, so this package imports no other stage."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from schemas.records import Decision, UsageEvent, Verdict, Work
from streams.budgets.book import BudgetBook
from streams.core.metrics import observe_decision, observe_promotion, observe_stages
from streams.core.outbox import Outbox
from streams.core.switches import Controls
from streams.idempotency.requests import Requests, reservation_key
from streams.output import chunks as stream_config
from streams.output.chunks import chunk_text, streamed
from streams.output.format import http_headers
from streams.postprocess.finalize import finalize
from streams.settings import Settings
from streams.usage.events import usage_event

CACHEABLE = {"rules", "coarse", "fine", "llm"}


class Caches(Protocol):
    """The cache stage as postprocess uses it (streams.cache.stage.CacheStage)."""

    def promote(self, twin: Work, agrees: Callable[[Mapping], bool]) -> str: ...

    def fill(self, work: Work, decision: Decision, switches: dict[str, bool]) -> None: ...


class Judge(Protocol):
    """Pairs served and naive decisions into verdicts (streams.shadow.verdict.ShadowJoin)."""

    def served(self, work: Work, usage: list) -> Verdict | None: ...

    def naive(self, work: Work) -> Verdict | None: ...

    def agrees(self, twin: Work, cached: Mapping) -> bool: ...


class Settles(Protocol):
    """Hard budgets' lease client (streams.runtime.leases.LeaseClient): the settle events of decided works."""

    def settlements(self, works: list[Work]) -> list[tuple[int, bytes]]: ...


class Postprocess:
    """The stage's step on a list of decided Work: run by its own agent on what the scoring workers decided,
    by the cache agent on its hits, and by ingest on the L1 hits and rule matches it answers (streams.runtime.local;
    same process, same cache-key partition), so none of those takes another topic hop. `requests` is ingest's
    idempotency state (a redelivered request gets its first decision again); `leases`, where hard budgets are
    leased, settles them wherever the decision completes."""

    def __init__(
        self,
        settings: Settings,
        cache: Caches,
        controls: Controls,
        book: BudgetBook,
        shadow: Judge,
        requests: Requests | None = None,
        leases: Settles | None = None,
    ):
        self.settings, self.cache, self.controls, self.book = settings, cache, controls, book
        self.shadow, self.requests, self.leases = shadow, requests, leases

    def __call__(self, items: list[Work]) -> Outbox:
        controls = self.controls
        out = Outbox()
        usage: list[UsageEvent] = out.usage
        verdicts: list[Verdict | None] = []
        for work in items:
            if work.shadow == "naive":  # a naive twin's decision: only ever judged against its served one
                verdicts.append(self.shadow.naive(work))
                continue
            if work.shadow == "promote":  # a near-miss's naive twin: promoted if its L2 candidate's answer agrees
                observe_promotion(self.cache.promote(work, functools.partial(self.shadow.agrees, work)))
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
            decision = done.decision.derive(tenant=work.request.tenant)  # routes it to its tenant's reply topics
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
        out.records += [("verdicts", v.request_id.encode(), v.dumps()) for v in verdicts if v is not None]
        if self.leases is not None:
            out.placed += [("budget", partition, value) for partition, value in self.leases.settlements(items)]
        observe_stages("postprocess", decisions_of(items))
        return out


def decisions_of(items: list[Work]) -> list[Work]:
    """The works that answer a request (not a stale entry's refresh or an L3 pre-answer)."""
    return [work for work in items if not work.refresh and not work.predictive]
