"""ingest: decode, validate, count tokens, reserve budget, admit or dead-letter, then distill (a pure step, see
streams.distill.work.Distiller). One Kafka message per request in, read in micro-batches by a BatchConsumer
(not a Faust agent: Faust's per-message cost was the largest single cost of a cache hit); the L1 hits and rule
matches on partitions this worker holds are answered here (streams.local), the rest go out as WorkBatch
envelopes per cache-key partition."""
from __future__ import annotations

import asyncio
import logging
import time

from schemas.records import Rejection, Work
from streams import pricing
from streams.ingest.budgets import Refused, request_scopes
from streams.ingest.decode import admit, reject
from streams.ingest.idempotency import CONFLICT, REDELIVERY, Requests, conflict_detail, reservation_key
from streams.postprocess.format import http_headers
from streams.usage.events import usage_event
from streams.wire import BatchConsumer

log = logging.getLogger("jev.ingest")


def reserve(book, work: Work):
    """Hold the most this request can spend (input + max output) before any model work."""
    req = work.request
    input_tokens = work.context_tokens + sum(work.candidate_tokens)
    return book.reserve(request_scopes(req), input_tokens + req.contracts.max_output_tokens,
                        pricing.max_cost(work.model, input_tokens, req.contracts.max_output_tokens),
                        reservation_id=reservation_key(req.tenant, req.request_id))


def prefetch_reserver(book):
    """The cache stage's hold on an L3 pre-answer: the requesting tenant's budgets (every scope of the request it
    follows) are reserved for the pre-answer's input + max output before any model work; False = refused, so
    the pre-answer is not made. Postprocess settles it like any request."""
    def reserve_prefetch(work: Work, input_tokens: int) -> bool:
        req = work.request
        held = book.reserve(request_scopes(req), input_tokens + req.contracts.max_output_tokens,
                            pricing.max_cost(work.model, input_tokens, req.contracts.max_output_tokens),
                            reservation_id=reservation_key(req.tenant, req.request_id))
        return not isinstance(held, Refused)
    return reserve_prefetch


def register(app, topics, settings, admission, book, controls, texts_ref, distill, local,
             requests: Requests | None = None) -> BatchConsumer:
    requests = requests if requests is not None else Requests(settings.idempotency_max)

    async def count_tokens(messages: list) -> None:
        """One micro-batch of requests: everything it sends is acknowledged when it returns."""
        admitted, usage, alerts, sent, again = [], [], [], [], []
        for message in messages:
            raw = message.value or b""  # a message without a value is invalid input
            try:
                result = admit(raw, admission, truncate=controls.on("ingest.truncation"))
            except Exception as exc:  # a defect, not bad input: the request is dead-lettered, the stage goes on
                log.exception("ingest failed on a request")
                result = reject(raw, "internal_error", f"ingest failed on this request ({exc!r}); it is kept here "
                                                       f"to be replayed once fixed", "ingest", time.time())
            if not isinstance(result, Rejection):
                req = result.request
                verdict, first = requests.check(req.tenant, req.request_id, raw)
                if verdict == REDELIVERY:  # admitted once already: no second reservation, model call or usage
                    again.extend([first] if first is not None else [])
                    continue
                if verdict == CONFLICT:
                    result = reject(raw, "duplicate_request_id", conflict_detail(req.tenant, req.request_id),
                                    "ingest", result.admitted_at, req.request_id)
            if not isinstance(result, Rejection) and controls.on("ingest.budgets"):
                held = reserve(book, result)
                alerts.extend(held.alerts)
                if isinstance(held, Refused) and held.policy == "degrade":
                    result.tier_cap = held.degrade_to
                elif isinstance(held, Refused):
                    requests.forget(result.request.tenant, result.request.request_id)
                    result = reject(raw, "over_budget", held.reason, "ingest", result.admitted_at,
                                    result.request.request_id)
            if isinstance(result, Rejection):
                sent.append(await topics.rejected.send(key=result.request_id or None, value=result))
                continue
            admitted.append(result)
            usage.append(usage_event(result.request, "ingest", model=result.model,
                                     candidates=len(result.request.candidates),
                                     outcome=f"degraded:{result.tier_cap}" if result.tier_cap else "admitted"))
        for alert in alerts:
            sent.append(await topics.alerts.send(key=alert.scope, value=alert))
        texts = texts_ref()
        if texts is not None and admitted:
            await asyncio.to_thread(texts.store, [w.request for w in admitted])
        distilled, saved = distill(admitted, controls.switches, time.time())
        onward, answered = local.split(distilled)
        await asyncio.gather(topics.send_work(topics.distilled, onward, key=lambda w: w.cache_key),
                             topics.send_usage(usage + saved), topics.send_decisions(again, http_headers),
                             answered, *sent)

    return app.service(BatchConsumer(settings.bootstrap, topics.requests.get_topic_name(), settings.ingest_group,
                                     count_tokens, settings.stage_batch_max, settings.stage_batch_wait_ms, depth=2))
