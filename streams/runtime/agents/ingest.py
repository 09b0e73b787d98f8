"""ingest: decode, validate, count tokens, reserve budget, admit or dead-letter, then distill (a pure step, see
streams.distill.work.Distiller). One Kafka message per request in, read in micro-batches by a BatchConsumer
(not a Faust agent: Faust's per-message cost was the largest single cost of a cache hit); the L1 hits and rule
matches on partitions this worker holds are answered here (streams.runtime.local), the rest go out as WorkBatch
envelopes per cache-key partition."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import faust

from schemas.records import Rejection
from streams.budgets.book import BudgetBook, Refused
from streams.budgets.reserve import reserve_request
from streams.core.deadletter import dead_letter
from streams.core.metrics import observe_protocol, observe_stages
from streams.core.outbox import Delivers, Outbox
from streams.core.switches import Controls
from streams.distill.work import Distiller
from streams.idempotency.requests import (
    CONFLICT,
    REDELIVERY,
    Requests,
    admitted_record,
    conflict_detail,
    decided_here,
    fingerprint,
)
from streams.ingest.decode import Admission, admit
from streams.ingest.fairness import TenantLimiter, charged_tokens, fair_order, sender_of
from streams.ingest.protocol import protocol_bytes
from streams.output.format import http_headers
from streams.runtime.consumer import BatchConsumer, serve
from streams.runtime.leases import LeaseClient
from streams.runtime.local import LocalAnswers
from streams.runtime.seen_log import RequestsSeenLog
from streams.runtime.topics import Topics
from streams.security import tenancy
from streams.shadow.sample import Sampler
from streams.usage.events import usage_event
from streams.usage.texts import RequestTexts

log = logging.getLogger("jev.ingest")


def register(
    app: faust.App,
    topics: Topics,
    settings,
    admission: Admission,
    book: BudgetBook,
    controls: Controls,
    texts_ref: Callable[[], RequestTexts | None],
    distill: Distiller,
    local: LocalAnswers,
    sender: Delivers,
    shadow: Sampler | None = None,
    leases: LeaseClient | None = None,
    requests: Requests | None = None,
    seen: RequestsSeenLog | None = None,
) -> BatchConsumer:
    """`shadow` (a streams.shadow.sample.Sampler) picks the requests also decided the naive way; `leases` (a
    streams.runtime.leases.LeaseClient, when hard budgets are leased) holds reservations against hard budgets;
    `requests` is the (tenant, request_id) idempotency state, shared with postprocess so a redelivery gets the
    first decision again; `seen` its requests-seen log, which the agents that decide wait on too."""
    tenancy.announce(settings)  # a first deployment's defaults let any producer speak for any tenant: said at start
    requests = requests if requests is not None else Requests(settings.idempotency_max)
    seen = seen if seen is not None else RequestsSeenLog(settings.bootstrap, requests)
    limiter = TenantLimiter.of(settings)

    @app.task
    async def follow_requests_seen():
        await seen.follow()

    async def ingest_requests(messages: list) -> Outbox:
        """One micro-batch of requests: what it sends (dead letters, alerts, usage, local answers, first
        decisions again for redeliveries, the rest as distilled work, and the naive twins of sampled requests as
        shadow work). The requests whose caller set a deadline (a checkout screening's 300 ms, counted from
        admission) are admitted first, earliest first, and what they send goes at once: a deadline is not spent
        admitting and distilling the rest of the batch."""
        keys, max_bytes = admission.tenant_keys, admission.max_bytes  # a tenant's identity before anything is charged
        senders = {id(m): sender_of(m.value or b"", max_bytes, keys, m.headers) for m in messages}
        urgent = sorted((m for m in messages if senders[id(m)][2]), key=lambda m: senders[id(m)][2])
        rest = [m for m in messages if not senders[id(m)][2]]
        pressured = len(messages) >= settings.stage_batch_max
        if urgent and rest:
            await sender.deliver(await ingest_part(urgent, senders, pressured))
        return await ingest_part(rest or urgent, senders, pressured)

    async def ingest_part(messages: list, senders: dict, loaded: bool) -> Outbox:
        """What `messages` send (`loaded`: their micro-batch was a full one)."""
        admitted, out, now, protocol = [], Outbox(), time.monotonic(), [0, 0]  # bytes sent, compact
        for message in fair_order(messages, lambda m: senders[id(m)][0], lambda m: len(m.value or b"")):
            raw = message.value or b""  # a message without a value is invalid input
            tenant, request_id, _ = senders[id(message)]
            wait = limiter.check(tenant, now) if tenant else None
            if wait is not None:  # over its tenant's rate: refused before any decoding work
                out.dead_letters.append(
                    dead_letter(
                        "rate_limited",
                        f"tenant {tenant!r} is over its admission rate (JEV_TENANT_RATES); send this "
                        f"request again after {wait:.2f} s",
                        "ingest",
                        raw,
                        request_id,
                        retry_after_s=round(wait, 3),
                        tenant=tenant,
                    )
                )
                continue
            try:
                result = admit(raw, admission, truncate=controls.on("ingest.truncation"), headers=message.headers)
            except Exception as exc:  # a defect, not bad input: the request is dead-lettered, the stage goes on
                log.exception("ingest failed on a request")
                result = dead_letter(
                    "internal_error",
                    f"ingest failed on this request ({exc!r}); it is kept here to be replayed once fixed",
                    "ingest",
                    raw,
                )
            if not isinstance(result, Rejection):
                req, print_ = result.request, fingerprint(raw)  # once: checked here, logged below
                verdict, first = requests.check(req.tenant, req.request_id, raw, print_)
                if verdict == REDELIVERY:  # admitted once already: no second reservation, model call or usage
                    if first is not None:
                        first = first.derive(tenant=req.tenant)
                        out.decisions.append((first, http_headers(first)))
                    continue
                if verdict == CONFLICT:
                    result = dead_letter(
                        "duplicate_request_id",
                        conflict_detail(req.tenant, req.request_id),
                        "ingest",
                        raw,
                        req.request_id,
                        result.admitted_at,
                    )
            if not isinstance(result, Rejection) and controls.on("ingest.budgets"):
                held = await reserve_request(book, leases, result, admission.stream_config)
                out.alerts += held.alerts
                if isinstance(held, Refused) and held.policy == "degrade":
                    result.tier_cap = held.degrade_to
                elif isinstance(held, Refused):
                    requests.forget(result.request.tenant, result.request.request_id)
                    result = dead_letter(
                        "over_budget", held.reason, "ingest", raw, result.request.request_id, result.admitted_at
                    )
            if isinstance(result, Rejection):
                if result.reason in tenancy.DENIED_WRITES:  # logged with the tenant it claimed, not its payload
                    claimed = sender_of(raw, admission.max_bytes)[0] or "?"
                    tenancy.denied("write", claimed, result.reason, f"request {result.request_id!r}")
                out.dead_letters.append(result.derive(tenant=tenant) if tenant else result)
                continue
            limiter.spend(tenant, charged_tokens(len(raw), result.context_tokens + sum(result.candidate_tokens)), now)
            admitted.append(result)
            out.records.append(admitted_record(result.request.tenant, result.request.request_id, raw, print_))
            sent_bytes, compact_bytes = protocol_bytes(result)
            protocol[0] += sent_bytes
            protocol[1] += compact_bytes
            out.usage.append(
                usage_event(
                    result.request,
                    "ingest",
                    model=result.model,
                    candidates=len(result.request.candidates),
                    outcome=f"degraded:{result.tier_cap}" if result.tier_cap else "admitted",
                    prompt_bytes=sent_bytes,
                    compact_bytes=compact_bytes,
                )
            )
        if admitted:  # one update per micro-batch, not two per request
            observe_protocol(*protocol)
        texts = texts_ref()
        if texts is not None and admitted:
            await asyncio.to_thread(texts.store, [w.request for w in admitted])
        pressured = "load" if loaded else "budget" if out.alerts else ""
        twins, skipped = shadow.take(admitted, pressured) if shadow is not None else ({}, [])
        distilled, saved = distill(admitted, controls.switches, time.time())
        naive = shadow.pair(twins, distilled, saved) if twins and shadow is not None else []
        observe_stages("ingest", distilled)
        out.usage += saved + skipped
        onward, answered = local.answer_owned(distilled)
        out.records = decided_here(out.records, answered.records)
        return out.extend(answered).send_work("distilled", onward).send_work("shadow", naive)

    return serve(
        app,
        BatchConsumer(
            settings.bootstrap,
            topics.requests.get_topic_name(),
            settings.ingest_group,
            ingest_requests,
            settings.stage_batch_max,
            settings.stage_batch_wait_ms,
            sender=sender,
            depth=2,
            before=seen.loaded,
            on_restart=lambda partition: requests.orphan_undecided(),
        ),
    )
