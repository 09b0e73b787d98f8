"""The ingest stage: a micro-batch of request messages in, the Outbox of what it sends out. It decodes, validates,
counts tokens, reserves budget, admits or dead-letters, then distills. What it works with from other stages (the
distiller, the local answers, the shadow sampler) and from the runtime (the lease client, the sender) it is handed
as the Protocols below, so this package imports no other stage and nothing of Kafka."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from schemas.records import Rejection, UsageEvent, Work
from streams.budgets.book import BudgetBook, Refused
from streams.budgets.reserve import Holds, reserve_request
from streams.core.deadletter import dead_letter
from streams.core.metrics import observe_protocol, observe_stages
from streams.core.outbox import Delivers, Outbox
from streams.core.switches import Controls
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
from streams.security import tenancy
from streams.settings import Settings
from streams.usage.events import usage_event
from streams.usage.texts import RequestTexts

log = logging.getLogger("jev.ingest")


class Message(Protocol):
    """A request as the runtime hands it over (aiokafka's ConsumerRecord): its bytes and headers."""

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


class Distills(Protocol):
    """Distill, then key each Work for the cache (streams.distill.work.Distiller)."""

    def __call__(
        self, works: list[Work], switches: Mapping[str, bool], now: float
    ) -> tuple[list[Work], list[UsageEvent]]: ...


class AnswersLocally(Protocol):
    """The L1 hits and rule matches on partitions this worker holds (streams.runtime.local.LocalAnswers)."""

    def answer_owned(self, works: list[Work]) -> tuple[list[Work], Outbox]: ...


class Samples(Protocol):
    """Picks the requests also decided the naive way (streams.shadow.sample.Sampler)."""

    def take(
        self, admitted: list[Work], pressured: str = ""
    ) -> tuple[dict[tuple[str, str], Work], list[UsageEvent]]: ...

    def pair(
        self, twins: dict[tuple[str, str], Work], distilled: list[Work], saved: list[UsageEvent]
    ) -> list[Work]: ...


class Ingest:
    """The stage's step on one micro-batch of request messages. `texts` gives the opt-in raw-text store (None when
    off); `requests` is the (tenant, request_id) idempotency state, shared with postprocess so a redelivery gets
    the first decision again; `shadow` picks the requests also decided the naive way; `leases`, where hard budgets
    are leased, holds reservations against them. `sender` delivers the part of a batch whose callers set a
    deadline before the rest is admitted."""

    def __init__(
        self,
        settings: Settings,
        admission: Admission,
        book: BudgetBook,
        controls: Controls,
        texts: Callable[[], RequestTexts | None],
        distill: Distills,
        local: AnswersLocally,
        sender: Delivers,
        requests: Requests,
        shadow: Samples | None = None,
        leases: Holds | None = None,
    ):
        self.settings, self.admission, self.book, self.controls = settings, admission, book, controls
        self.texts, self.distill, self.local, self.sender = texts, distill, local, sender
        self.requests, self.shadow, self.leases = requests, shadow, leases
        self.limiter = TenantLimiter.of(settings)

    async def __call__(self, messages: Sequence[Message]) -> Outbox:
        """What one micro-batch of requests sends (dead letters, alerts, usage, local answers, first decisions again
        for redeliveries, the rest as distilled work, and the naive twins of sampled requests as shadow work). The
        requests whose caller set a deadline (a checkout screening's 300 ms, counted from admission) are admitted
        first, earliest first, and what they send goes at once: a deadline is not spent admitting and distilling
        the rest of the batch."""
        keys, max_bytes = self.admission.tenant_keys, self.admission.max_bytes  # identity before any charge
        senders = {id(m): sender_of(m.value or b"", max_bytes, keys, m.headers) for m in messages}
        urgent = sorted((m for m in messages if senders[id(m)][2]), key=lambda m: senders[id(m)][2])
        rest = [m for m in messages if not senders[id(m)][2]]
        pressured = len(messages) >= self.settings.stage_batch_max
        if urgent and rest:
            await self.sender.deliver(await self.part(urgent, senders, pressured))
        return await self.part(rest or urgent, senders, pressured)

    async def part(self, messages: list[Message], senders: dict[int, tuple[str, str, float]], loaded: bool) -> Outbox:
        """What `messages` send (`loaded`: their micro-batch was a full one)."""
        admission, controls, requests, limiter = self.admission, self.controls, self.requests, self.limiter
        admitted: list[Work] = []
        out, now, protocol = Outbox(), time.monotonic(), [0, 0]  # bytes sent, compact
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
            result: Work | Rejection
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
                held = await reserve_request(self.book, self.leases, result, admission.stream_config)
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
        texts = self.texts()
        if texts is not None and admitted:
            await asyncio.to_thread(texts.store, [w.request for w in admitted])
        shadow = self.shadow
        pressured = "load" if loaded else "budget" if out.alerts else ""
        twins, skipped = shadow.take(admitted, pressured) if shadow is not None else ({}, [])
        distilled, saved = self.distill(admitted, controls.switches, time.time())
        naive = shadow.pair(twins, distilled, saved) if twins and shadow is not None else []
        observe_stages("ingest", distilled)
        out.usage += saved + skipped
        onward, answered = self.local.answer_owned(distilled)
        out.records = decided_here(out.records, answered.records)
        return out.extend(answered).send_work("distilled", onward).send_work("shadow", naive)
