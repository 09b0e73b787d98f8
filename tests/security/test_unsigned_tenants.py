"""With JEV_TENANT_KEYS set, a producer without acme's key names acme, on the real local broker and pipeline: 60
unsigned "acme" requests no longer use up acme's 5/s rate bucket (before: acme's own 4 signed requests that followed
were all rate_limited), and batch members naming globex without its signature, or a tenant JEV_TENANTS does not
admit, are rejected before anything is generated or billed (before: generated and billed 844 tokens)."""

import asyncio
import time
import uuid

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas.batch import BatchMember, BatchResult
from schemas.records import Control
from schemas.topics import name
from streams.budgets.book import BudgetBook
from streams.core.tenants import SIGNATURE_HEADER, signature
from tests.integration.test_idempotency_restart import records
from tests.security.test_forged_internal_topics import ids_in
from tests.streams.runtime.agents.test_batch import batch_app  # noqa: F401 (the batch agents on the broker)
from tests.streams.runtime.test_agents import REQUEST
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration
KEYS = {"acme": "acme-key-0123456789abcdef", "globex": "globex-key-0123456789abcdef"}


@pytest.fixture
def settings(settings, tmp_path):
    """Producers spend only as the tenants whose keys they hold; acme, globex and initech are the tenants."""
    path = tmp_path / "tenant-keys.json"
    path.write_bytes(orjson.dumps(KEYS))
    return settings.replace(tenant_keys=str(path), tenants="acme,globex,initech")


async def send(bootstrap: str, topic: str, values: list[bytes], signed_as: str = "") -> None:
    """Write `values` as a producer does, with `signed_as`'s tenant signature (none when empty)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        for value in values:
            key = KEYS.get(signed_as, "").encode()
            headers = [(SIGNATURE_HEADER, signature(key, value).encode())] if signed_as else None
            await producer.send(name(topic), value, headers=headers)
        await producer.flush()
    finally:
        await producer.stop()


async def test_unsigned_requests_naming_acme_do_not_use_up_acmes_rate(settings):
    unsigned = [orjson.dumps({**REQUEST, "request_id": f"forged-{i}"}) for i in range(60)]
    signed = [orjson.dumps({**REQUEST, "request_id": f"own-{i}", "state": f"trail shoes {i}"}) for i in range(4)]
    async with Pipeline(
        settings.replace(backend="lexical", tenant_rates="acme=5:0"), known_decision_types(), stages_process=True
    ) as pipe:
        await send(pipe.settings.bootstrap, "requests", unsigned)
        await send(pipe.settings.bootstrap, "requests", signed, signed_as="acme")
        decisions, rejections = await pipe.collect(4, 60, timeout=90)
    reasons = {r.request_id: r.reason for r in rejections}
    assert {reasons.get(f"forged-{i}") for i in range(60)} == {"unauthenticated_tenant"}
    assert sorted(d for d in decisions if d.startswith("own-")) == [f"own-{i}" for i in range(4)]
    assert not any(r.reason == "rate_limited" for r in rejections)
    forged = next(r for r in rejections if r.request_id == "forged-0")
    assert SIGNATURE_HEADER in forged.detail and "acme" in forged.detail  # names the fix: sign with acme's key


def member(tenant: str, name_: str, job: str) -> bytes:
    return BatchMember(
        job=job,
        member=name_,
        kind="marketing",
        template="weekly_report",
        quota_tokens=400,
        variables={"department": name_, "notes": "shipped the release; two incidents; hiring two engineers"},
        tenant=tenant,
    ).dumps()


async def test_batch_members_naming_globex_unsigned_or_an_unadmitted_tenant_are_refused(batch_app):  # noqa: F811
    from tests.streams.runtime.agents.test_batch import SAMPLE

    line = orjson.loads(SAMPLE.read_text().splitlines()[0])
    job = f"forge-{uuid.uuid4().hex[:6]}"
    raw = {k: v for k, v in line.items() if k not in ("job", "member", "tenant")}

    def as_member(tenant: str, who: str) -> bytes:
        return orjson.dumps({**raw, "job": job, "member": who, "tenant": tenant})

    bootstrap = batch_app.bootstrap
    await send(bootstrap, "batch", [as_member("globex", "g1"), as_member("globex", "g2")])  # unsigned
    await send(bootstrap, "batch", [as_member("umbrella", "u1")], signed_as="globex")  # not admitted
    await send(bootstrap, "batch", [as_member("acme", "a1")], signed_as="acme")  # the genuine one
    deadline, rejected = time.monotonic() + 60, {}
    while time.monotonic() < deadline and len(rejected) < 3:
        rejected = {
            orjson.loads(v)["request_id"]: orjson.loads(v)
            for v in await records(bootstrap, "rejected", quiet_s=1.0)
            if orjson.loads(v)["request_id"].startswith(job)
        }
        await asyncio.sleep(0.5)
    assert {k: v["reason"] for k, v in rejected.items()} == {
        f"{job}:g1": "unauthenticated_tenant",
        f"{job}:g2": "unauthenticated_tenant",
        f"{job}:u1": "unknown_tenant",
    }
    assert "JEV_TENANTS" in rejected[f"{job}:u1"]["detail"]
    results = {}
    while time.monotonic() < deadline and not results:
        results = {
            r.member: r
            for v in await records(bootstrap, "batch_results", 1.0)
            if (r := BatchResult.loads(v)).job == job
        }
    assert set(results) == {"a1"}  # only the signed member was generated
    billed = ids_in(await records(bootstrap, "usage", 1.0))
    assert f"{job}:a1" in billed and not {f"{job}:g1", f"{job}:g2", f"{job}:u1"} & billed


def test_a_member_over_its_tenants_hard_budget_is_refused_and_a_member_within_settles_what_it_used(settings):
    from streams.batch.stage import MemberCheck

    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 500}))
    check = MemberCheck(settings, book)
    job = "budgeted"

    def signed(tenant: str, who: str, quota: int):
        m = BatchMember.loads(member(tenant, who, job)).derive(quota_tokens=quota)
        raw = m.dumps()
        return m, raw, ((SIGNATURE_HEADER, signature(KEYS[tenant].encode(), raw).encode()),)

    first, raw, headers = signed("acme", "m1", 400)
    assert check.refusal(first, raw, headers) is None  # 400 of 500 held
    second, raw2, headers2 = signed("acme", "m2", 400)
    refused = check.refusal(second, raw2, headers2)
    assert refused.reason == "over_budget" and "quota_tokens" in refused.detail
    done = BatchResult(
        job=job,
        member="m1",
        kind="marketing",
        template="weekly_report",
        status="ok",
        call_id="c",
        input_tokens=50,
        output_tokens=30,
    )
    check.settle(done, first)
    assert check.refusal(second, raw2, headers2) is None  # 80 used: the quota held back is free again
