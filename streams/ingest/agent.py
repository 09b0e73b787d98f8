"""ingest: decode, validate, count tokens, reserve budget, admit or dead-letter, then distill (a pure step, see
streams.distill.work.Distiller). One Kafka message per request in, read in micro-batches by a BatchConsumer
(not a Faust agent: Faust's per-message cost was the largest single cost of a cache hit); the L1 hits and rule
matches on partitions this worker holds are answered here (streams.local), the rest go out as WorkBatch
envelopes per cache-key partition."""
from __future__ import annotations

import asyncio
import logging
import time

import faust

from schemas.records import Rejection, Work
from schemas.topics import name
from streams import pricing
from streams.ingest.budgets import Refused, request_scopes
from streams.deadletter import dead_letter
from streams.ingest.decode import admit
from streams.ingest.fairness import TenantLimiter, charged_tokens, fair_order, sender_of
from streams.ingest.idempotency import (CONFLICT, LOG_TOPIC, REDELIVERY, Requests, admitted_record, conflict_detail,
                                       reservation_key)
from streams.postprocess import stream as stream_mod
from streams.ingest.protocol import protocol_bytes
from streams.metrics import observe_protocol, observe_stages
from streams.postprocess.format import http_headers
from streams.usage.events import usage_event
from streams.consumer import BatchConsumer, follow_from_start
from streams.outbox import Outbox

log = logging.getLogger("jev.ingest")


async def reserve(book, leases, work: Work, stream_config=None):
    """Hold the most this request can spend (input + max output: a stream's length) before any model work:
    against the leases of its hard token budgets (streams.leases, when on), then the local book (soft budgets,
    alerts, cost)."""
    req = work.request
    hold = await leases.reserve(work) if leases is not None else None
    if isinstance(hold, Refused):
        return hold
    input_tokens = work.context_tokens + sum(work.candidate_tokens)
    output = stream_mod.reserved_output(req, stream_config)
    held = book.reserve(request_scopes(req), input_tokens + output, pricing.max_cost(work.model, input_tokens, output),
                        reservation_id=reservation_key(req.tenant, req.request_id))
    if hold is not None and isinstance(held, Refused):
        leases.release(hold)
    elif hold is not None:
        work.budget_holds, work.budget_tokens = hold.leases, hold.tokens
    return held


def prefetch_reserver(book, leases=None):
    """The cache stage's hold on an L3 pre-answer: the requesting tenant's budgets (every scope of the request it
    follows) are reserved for the pre-answer's input + max output before any model work, against the leases
    this process holds now where hard budgets are leased (a pre-answer waits for no owner); False = refused, so
    the pre-answer is not made. Postprocess settles it like any request."""
    def reserve_prefetch(work: Work, input_tokens: int) -> bool:
        req = work.request
        tokens = input_tokens + req.contracts.max_output_tokens
        hold = leases.hold_now(work, tokens) if leases is not None else None
        if isinstance(hold, Refused):
            return False
        held = book.reserve(request_scopes(req), tokens,
                            pricing.max_cost(work.model, input_tokens, req.contracts.max_output_tokens),
                            reservation_id=reservation_key(req.tenant, req.request_id))
        if hold is not None and isinstance(held, Refused):
            leases.release(hold)
        elif hold is not None:
            work.budget_holds, work.budget_tokens = hold.leases, hold.tokens
        return not isinstance(held, Refused)
    return reserve_prefetch


def register(app, topics, settings, admission, book, controls, texts_ref, distill, local, sender,
             shadow=None, leases=None, requests: Requests | None = None) -> BatchConsumer:
    """`shadow` (a streams.shadow.sample.Sampler) picks the requests also decided the naive way; `leases` (a
    streams.leases.agent.LeaseClient, when hard budgets are leased) holds reservations against hard budgets;
    `requests` is the (tenant, request_id) idempotency state, shared with postprocess so a redelivery gets the
    first decision again."""
    requests = requests if requests is not None else Requests(settings.idempotency_max)
    seen = app.jev_requests_seen = RequestsSeenLog(settings.bootstrap, requests)
    limiter = app.jev_limiter = TenantLimiter.of(settings)

    @app.task
    async def follow_requests_seen():
        await seen.follow()

    async def ingest_requests(messages: list) -> Outbox:
        """One micro-batch of requests: what it sends (dead letters, alerts, usage, local answers, first
        decisions again for redeliveries, the rest as distilled work, and the naive twins of sampled requests as
        shadow work)."""
        admitted, out, now = [], Outbox(), time.monotonic()
        senders = {id(m): sender_of(m.value or b"", admission.max_bytes) for m in messages}
        for message in fair_order(messages, lambda m: senders[id(m)][0], lambda m: len(m.value or b"")):
            raw = message.value or b""  # a message without a value is invalid input
            tenant, request_id = senders[id(message)]
            wait = limiter.check(tenant, now) if tenant else None
            if wait is not None:  # over its tenant's rate: refused before any decoding work
                out.dead_letters.append(dead_letter(
                    "rate_limited", f"tenant {tenant!r} is over its admission rate (JEV_TENANT_RATES); send this "
                                    f"request again after {wait:.2f} s", "ingest", raw, request_id,
                    retry_after_s=round(wait, 3)))
                continue
            try:
                result = admit(raw, admission, truncate=controls.on("ingest.truncation"))
            except Exception as exc:  # a defect, not bad input: the request is dead-lettered, the stage goes on
                log.exception("ingest failed on a request")
                result = dead_letter("internal_error", f"ingest failed on this request ({exc!r}); it is kept here "
                                                       f"to be replayed once fixed", "ingest", raw)
            if not isinstance(result, Rejection):
                req = result.request
                verdict, first = requests.check(req.tenant, req.request_id, raw)
                if verdict == REDELIVERY:  # admitted once already: no second reservation, model call or usage
                    if first is not None:
                        out.decisions.append((first, http_headers(first)))
                    continue
                if verdict == CONFLICT:
                    result = dead_letter("duplicate_request_id", conflict_detail(req.tenant, req.request_id),
                                         "ingest", raw, req.request_id, result.admitted_at)
            if not isinstance(result, Rejection) and controls.on("ingest.budgets"):
                held = await reserve(book, leases, result, admission.stream_config)
                out.alerts += held.alerts
                if isinstance(held, Refused) and held.policy == "degrade":
                    result.tier_cap = held.degrade_to
                elif isinstance(held, Refused):
                    requests.forget(result.request.tenant, result.request.request_id)
                    result = dead_letter("over_budget", held.reason, "ingest", raw, result.request.request_id,
                                         result.admitted_at)
            if isinstance(result, Rejection):
                out.dead_letters.append(result)
                continue
            limiter.spend(tenant, charged_tokens(len(raw), result.context_tokens + sum(result.candidate_tokens)), now)
            admitted.append(result)
            out.records.append(admitted_record(result.request.tenant, result.request.request_id, raw))
            sent_bytes, compact_bytes = protocol_bytes(result)
            observe_protocol(sent_bytes, compact_bytes)
            out.usage.append(usage_event(result.request, "ingest", model=result.model,
                                     candidates=len(result.request.candidates),
                                     outcome=f"degraded:{result.tier_cap}" if result.tier_cap else "admitted",
                                     prompt_bytes=sent_bytes, compact_bytes=compact_bytes))
        texts = texts_ref()
        if texts is not None and admitted:
            await asyncio.to_thread(texts.store, [w.request for w in admitted])
        pressured = "load" if len(messages) >= settings.stage_batch_max else "budget" if out.alerts else ""
        twins, skipped = shadow.take(admitted, pressured) if shadow is not None else ({}, [])
        distilled, saved = distill(admitted, controls.switches, time.time())
        naive = shadow.pair(twins, distilled, saved) if twins else []
        observe_stages("ingest", distilled)
        out.usage += saved + skipped
        onward, answered = local.answer_owned(distilled)
        return out.extend(answered).send_work("distilled", onward).send_work("shadow", naive)

    return app.service(BatchConsumer(settings.bootstrap, topics.requests.get_topic_name(), settings.ingest_group,
                                     ingest_requests, settings.stage_batch_max, settings.stage_batch_wait_ms,
                                     sender=sender, depth=2, before=seen.loaded))


class RequestsSeenLog:
    """The requests-seen topic (streams.ingest.idempotency), read from its beginning and followed into
    `requests` by every stage process. Ingest, and the agents that decide (cache hits, postprocess) when they
    read a topic, take their first input only once what the topic held at start is read (`loaded`, which starts
    the follower if nothing has yet), or LOAD_TIMEOUT_S passed: then they go on, logging that redeliveries may
    be decided again."""

    LOAD_TIMEOUT_S = 60.0

    def __init__(self, bootstrap: str, requests: Requests, poll_ms: int = 100):
        self.bootstrap, self.requests, self.poll_ms = bootstrap, requests, poll_ms
        self.stopping, self.caught_up = asyncio.Event(), asyncio.Event()
        self.following: asyncio.Future | None = None

    async def follow(self) -> None:
        """Follow the topic until stopped (one follower per process, whoever starts it first)."""
        if self.following is None:
            self.following = asyncio.ensure_future(follow_from_start(
                self.bootstrap, name(LOG_TOPIC), self.requests.apply, self.stopping, self.poll_ms,
                "requests-seen record", caught_up=self.caught_up.set))
        await asyncio.shield(self.following)

    async def wait_loaded(self, stream) -> None:
        """`loaded`, for an agent reading `stream`: only when it reads a topic (not an agent tested alone)."""
        if isinstance(stream.channel, faust.Topic):
            await self.loaded()

    async def loaded(self) -> None:
        if self.following is None:
            asyncio.ensure_future(self.follow())
        try:
            await asyncio.wait_for(self.caught_up.wait(), self.LOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("the requests-seen topic was not read within %.0f s: going on without it, so a "
                        "redelivery of a request decided before this process started may be decided again",
                        self.LOAD_TIMEOUT_S)
