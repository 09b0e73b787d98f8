"""Batch agents: aggregate members into merged generation calls (or individual ones where merging does not pay),
split the output into per-member results.

batch (BatchMember JSON) ─► aggregate_batch ─► batch_merged (MergedCall) ─► split_batch ─► batch_results
Members with bad JSON or fields go to `rejected`; usage is one event per member (stage `batch`).
"""

from __future__ import annotations

import asyncio

import orjson

from schemas.batch import BatchMember, BatchResult, MergedCall
from schemas.records import Request
from streams.batch import aggregate, config, split
from streams.core.deadletter import dead_letter
from streams.core.outbox import Outbox
from streams.core.tenants import BadTenant, canonical
from streams.models import pool as pool_mod
from streams.models import registry
from streams.runtime.consumer import run_agent
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


def usage(result: BatchResult, member: BatchMember, model: str):
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


def register(app, topics, settings, sender) -> None:
    model = settings.default_model
    state: dict = {}
    retry_rate = aggregate.RetryRate()  # learnt from the splitter's results, read by the planner

    async def generator():
        if "generator" not in state:  # loaded once, off the loop (SmolLM2 takes tens of seconds)
            state["generator"] = await asyncio.to_thread(
                registry.generator, settings.generator, pool_mod.load(settings.models), model
            )
        return state["generator"]

    def result_records(result: BatchResult, member: BatchMember, out: Outbox) -> None:
        """The result on the all-tenant batch_results topic and on its member's tenant's own reply topic."""
        value = result.derive(tenant=member.tenant).dumps()
        out.records.append(("batch_results", result.job.encode(), value))
        out.replies.append(("batch_results", member.tenant, result.job.encode(), value))

    async def aggregate_members(raws: list) -> Outbox:
        """One window of batch members: merged calls generated, members that cannot join one answered failed."""
        members, out = [], Outbox()
        for raw in raws:
            try:
                members.append(decode_member(raw))
            except ValueError as exc:
                out.dead_letters.append(dead_letter("bad_batch_member", str(exc), "batch", raw))
        cfg = config.load(settings.batch_templates)
        for group in aggregate.group(members, settings.batch_window_max):
            calls, failed = aggregate.plan(group, cfg, model, retry_rate.rate(group[0].template))
            for result in failed:
                member = next(m for m in group if m.member == result.member)
                result_records(result, member, out)
                out.usage.append(usage(result, member, model))
            for call in calls:
                call = await asyncio.to_thread(aggregate.generate, call, await generator(), model)
                out.records.append(("batch_merged", call.job.encode(), call.dumps()))
        return out

    async def split_call(raw: bytes) -> Outbox:
        """One merged call's output split into per-member results."""
        call = MergedCall.loads(raw)
        template = config.load(settings.batch_templates).template(call.template)
        results = await asyncio.to_thread(split.split, call, template, await generator(), model)
        if call.sent == "merged":
            retry_rate.record(call.template, [r.retried for r in results])
        members = {s.member.member: s.member for s in call.shares}
        out = Outbox(usage=[usage(r, members[r.member], model) for r in results])
        for result in results:
            result_records(result, members[result.member], out)
        return out

    @app.agent(topics.batch, name="aggregate_batch")
    async def aggregate_batch(stream):
        await run_agent(
            stream.take(settings.batch_window_max, within=settings.batch_window_ms / 1000), aggregate_members, sender
        )

    @app.agent(topics.batch_merged, name="split_batch")
    async def split_batch(stream):
        await run_agent(stream, split_call, sender)  # one merged call per message: each is a model call already
