"""The batch stage: aggregate members into merged generation calls (or individual ones where merging does not
pay), split the output into per-member results.

batch (BatchMember JSON) ─► aggregate ─► batch_merged (MergedCall) ─► split ─► batch_results
Members with bad JSON or fields go to `rejected`; usage is one event per member (stage `batch`). A member is a
request like any other: its tenant must be admitted (JEV_TENANTS), signed for (JEV_TENANT_KEYS: the message's
jev-tenant-sig header, as a request's) and within its budgets (its quota reserved, settled with what it used), else
it is rejected unknown_tenant, unauthenticated_tenant or over_budget before anything is generated or billed.
"""

from __future__ import annotations

import asyncio

import orjson

from schemas.batch import BatchMember, BatchResult, MergedCall
from schemas.records import Rejection, Request
from streams.batch import aggregate, config, split
from streams.budgets.book import BudgetBook, Refused, request_scopes
from streams.core import tenants
from streams.core.deadletter import dead_letter
from streams.core.outbox import Outbox
from streams.core.tenants import BadTenant, canonical
from streams.idempotency.requests import reservation_key
from streams.models import pool as pool_mod
from streams.models import registry
from streams.security import tenancy as identity
from streams.settings import Settings
from streams.usage.events import usage_event

REQUIRED = ("job", "member", "kind", "template", "quota_tokens")


def decode_member(raw: bytes) -> BatchMember:
    """A BatchMember from JSON bytes, or ValueError naming the bad field."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError("a batch member must be a JSON object")
    missing = [f for f in REQUIRED if f not in data]
    if missing:
        raise ValueError(f"batch member misses {', '.join(missing)} (each line needs {', '.join(REQUIRED)})")
    try:
        member = BatchMember.loads(raw)
    except Exception as exc:
        raise ValueError(f"not a batch member: {exc}") from None
    for name in ("job", "member", "kind", "template"):
        if not isinstance(getattr(member, name), str) or not getattr(member, name):
            raise ValueError(f"batch member field {name!r} must be a non-empty string")
    if not isinstance(member.quota_tokens, int) or member.quota_tokens <= 0:
        raise ValueError(f"batch member {member.member!r}: quota_tokens must be a positive integer")
    if not isinstance(member.variables, dict):
        raise ValueError(f"batch member {member.member!r}: variables must be a JSON object")
    try:
        tenant = canonical(member.tenant)
    except BadTenant as exc:
        raise ValueError(f"batch member {member.member!r}: {exc}") from None
    return member if tenant == member.tenant else member.derive(tenant=tenant)


def member_request(result: BatchResult, tenant: str, service: str, business_line: str) -> Request:
    return Request(
        request_id=f"{result.job}:{result.member}",
        tenant=tenant,
        service=service,
        kind="generate",
        decision_type=result.template,
        business_line=business_line,
        state="",
        business_event=result.job,
    )


class MemberCheck:
    """Whether a decoded member may be generated: its tenant admitted, signed for and within its budgets."""

    def __init__(self, settings, book: BudgetBook | None):
        self.admitted = tenants.admitted(settings.tenants)
        self.keys = tenants.load_keys(settings.tenant_keys)
        self.book = book

    def refusal(self, member: BatchMember, raw: bytes, headers) -> Rejection | None:
        """The member's rejection, or None (its quota then held against its budgets)."""
        rid = f"{member.job}:{member.member}"
        if self.admitted is not None and member.tenant not in self.admitted:
            detail = f"tenant {member.tenant!r} is not admitted: add it to JEV_TENANTS or correct the member's tenant"
            return dead_letter("unknown_tenant", detail, "batch", raw, rid)
        if why := tenants.unbound(self.keys, member.tenant, raw, headers):
            return dead_letter("unauthenticated_tenant", why, "batch", raw, rid)
        if self.book is None:
            return None
        request = Request(
            request_id=rid,
            tenant=member.tenant,
            service=member.service,
            kind="generate",
            decision_type=member.template,
            business_line=member.business_line,
            state="",
        )
        held = self.book.reserve(
            request_scopes(request), member.quota_tokens, 0.0, reservation_id=reservation_key(member.tenant, rid)
        )
        if isinstance(held, Refused):
            detail = f"{held.reason}: raise the budget or lower the member's quota_tokens ({member.quota_tokens})"
            return dead_letter("over_budget", detail, "batch", raw, rid)
        return None

    def settle(self, result: BatchResult, member: BatchMember) -> list:
        """Count what the member used against its budgets (its quota's reservation released); the alerts."""
        key = reservation_key(member.tenant, f"{result.job}:{result.member}")
        if self.book is None or (held := self.book.open.get(key)) is None:
            return []
        return self.book.settle(held, result.input_tokens + result.output_tokens, 0.0)


def member_usage(result: BatchResult, member: BatchMember, model: str):
    section = "failed" if result.status == "failed" else "retried" if result.retried else result.sent
    return usage_event(
        member_request(result, member.tenant, member.service, member.business_line),
        "batch",
        section=section,
        model=model,
        input_tokens=result.input_tokens,
        output_tokens=result.output_tokens,
        nominal_tokens=result.individual_tokens,
        outcome="ok" if result.status == "ok" else "failed",
    )


class BatchStage:
    """Batch members in, merged generation calls out (aggregate); a merged call's output in, per-member results
    out (split). Each step returns the Outbox of what it sends. The generator is loaded on first use, off the loop
    (SmolLM2 takes tens of seconds)."""

    def __init__(self, settings: Settings, book: BudgetBook | None = None):
        """`book`: the process's budgets, which members reserve their quota against (None: members are held to no
        budget, only to JEV_TENANTS and JEV_TENANT_KEYS)."""
        self.settings, self.model = settings, settings.default_model
        self.check = MemberCheck(settings, book)
        self.retry_rate = aggregate.RetryRate()  # learnt from the splitter's results, read by the planner
        self.loaded = None

    async def generator(self):
        if self.loaded is None:
            self.loaded = await asyncio.to_thread(
                registry.generator, self.settings.generator, pool_mod.load(self.settings.models), self.model
            )
        return self.loaded

    @staticmethod
    def result_records(result: BatchResult, member: BatchMember, out: Outbox) -> None:
        """The result on the all-tenant batch_results topic and on its member's tenant's own reply topic."""
        value = result.derive(tenant=member.tenant).dumps()
        out.records.append(("batch_results", result.job.encode(), value))
        out.replies.append(("batch_results", member.tenant, result.job.encode(), value))

    async def aggregate(self, raws: list[tuple[bytes, tuple]]) -> Outbox:
        """One window of batch members, as (value, headers): merged calls generated, members that cannot join
        one answered failed."""
        settings, model, check = self.settings, self.model, self.check
        members, out = [], Outbox()
        for raw, headers in raws:
            try:
                member = decode_member(raw)
            except ValueError as exc:
                out.dead_letters.append(dead_letter("bad_batch_member", str(exc), "batch", raw))
                continue
            if (refused := check.refusal(member, raw, headers)) is not None:
                if refused.reason in identity.DENIED_WRITES:  # logged with the tenant it claimed, not its payload
                    identity.denied("write", member.tenant, refused.reason, f"batch member {refused.request_id!r}")
                out.dead_letters.append(refused.derive(tenant=member.tenant))  # told on its tenant's topic too
            else:
                members.append(member)
        cfg = config.load(settings.batch_templates)
        for group in aggregate.group(members, settings.batch_window_max):
            calls, failed = aggregate.plan(group, cfg, model, self.retry_rate.rate(group[0].template))
            for result in failed:
                member = next(m for m in group if m.member == result.member)
                self.result_records(result, member, out)
                out.usage.append(member_usage(result, member, model))
                out.alerts += check.settle(result, member)
            for call in calls:
                call = await asyncio.to_thread(aggregate.generate, call, await self.generator(), model)
                out.records.append(("batch_merged", call.job.encode(), call.dumps()))
        return out

    async def split(self, call: MergedCall) -> Outbox:
        """One merged call's output split into per-member results."""
        template = config.load(self.settings.batch_templates).template(call.template)
        results = await asyncio.to_thread(split.split, call, template, await self.generator(), self.model)
        if call.sent == "merged":
            self.retry_rate.record(call.template, [r.retried for r in results])
        members = {s.member.member: s.member for s in call.shares}
        out = Outbox(usage=[member_usage(r, members[r.member], self.model) for r in results])
        for result in results:
            self.result_records(result, members[result.member], out)
            out.alerts += self.check.settle(result, members[result.member])
        return out
