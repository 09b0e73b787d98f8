"""The batch agents on the real local broker: a 12-department job in, one result per member out."""

import asyncio
import json
import uuid
from pathlib import Path

import faust
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra.broker import create_topics
from schemas.records import UsageBatch
from schemas.topics import TOPICS, name
from streams.batch.stage import decode_member
from streams.runtime.agents import batch as batch_agent
from streams.runtime.sender import Sender
from streams.security import signing
from workers.cli import batch_runner as runner

pytestmark = pytest.mark.integration
SAMPLE = Path(__file__).parents[4] / "streams" / "batch" / "sample_weekly_reports.jsonl"


@pytest.fixture
async def batch_app(settings, broker):
    """Only the batch agents, on the session broker, with the extractive generator."""
    settings = settings.replace(
        broker=broker.url, app_id=f"batch-{uuid.uuid4().hex[:8]}", generator="extractive", batch_window_ms=500
    )
    (Path(settings.data_dir) / "faust").mkdir(parents=True, exist_ok=True)
    await create_topics(settings.bootstrap, [t.name for t in TOPICS.values()], settings.partitions)
    app = faust.App(
        settings.app_id,
        broker=settings.broker,
        store="memory://",
        web_enabled=False,
        datadir=str(Path(settings.data_dir) / "faust"),
        topic_partitions=settings.partitions,
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        consumer_auto_offset_reset="earliest",
    )
    sender = Sender(settings.bootstrap, settings.partitions)
    app.service(sender)
    batch_agent.register(app, settings, sender)
    worker = faust.Worker(
        app, loglevel="warning", loop=asyncio.get_running_loop(), daemon=False, redirect_stdouts=False, quiet=True
    )
    worker.spinner = None
    await worker.start()
    yield settings
    await worker.stop()


async def usage_events(bootstrap: str, job: str) -> list:
    consumer = AIOKafkaConsumer(name("usage"), bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=2000)
    finally:
        await consumer.stop()
    return [
        e
        for msgs in batches.values()
        for m in msgs
        for e in UsageBatch.loads(m.value).events
        if e.business_event == job
    ]


async def test_job_gets_every_result_within_quota_and_fewer_tokens(batch_app, tmp_path):
    lines = SAMPLE.read_text().splitlines()
    job = f"weekly-{uuid.uuid4().hex[:6]}"
    broken = json.loads(lines[0]) | {"member": "tiny-quota", "quota_tokens": 20}
    path = tmp_path / "job.jsonl"
    path.write_text(
        "\n".join(json.dumps(json.loads(line) | {"job": job}) for line in lines)
        + "\n"
        + json.dumps(broken | {"job": job})
        + "\n"
    )
    members = runner.read_job(str(path))
    assert len(members) == 13

    report, results = await runner.submit(batch_app, members, wait=True, timeout=120)

    assert sorted(r.member for r in results) == sorted(m.member for m in members)
    assert report["results"] == 13 and report["failed"] == 1 and report["pending"] == 0
    failed = next(r for r in results if r.status == "failed")
    assert failed.member == "tiny-quota" and "too small" in failed.error
    ok = [r for r in results if r.status == "ok"]
    assert all(r.quota_used <= r.quota_tokens and r.label == "extractive" for r in ok)
    assert report["quota_violations"] == 0 and report["merged_calls"] == 1
    assert report["tokens_merged"] < report["tokens_individual"]
    events = await usage_events(batch_app.bootstrap, job)
    assert len(events) == 13 and {e.stage for e in events} == {"batch"}
    assert sum(e.input_tokens + e.output_tokens for e in events) == report["tokens_merged_actual"]


async def rejections(bootstrap: str, wanted: set[str]) -> list[dict]:
    """The rejected topic's records, read until one of each reason in `wanted` came by (at most 20 s)."""
    consumer = AIOKafkaConsumer(
        name("rejected"), bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    found: list[dict] = []
    try:
        for _ in range(40):
            batches = await consumer.getmany(timeout_ms=500)
            found += [orjson.loads(m.value) for msgs in batches.values() for m in msgs]
            if wanted <= {r["reason"] for r in found}:
                break
    finally:
        await consumer.stop()
    return found


async def test_bad_member_goes_to_dead_letters(batch_app):
    producer = AIOKafkaProducer(bootstrap_servers=batch_app.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(name("batch"), orjson.dumps({"job": "x", "member": "m"}), key=b"x")
    finally:
        await producer.stop()
    found = await rejections(batch_app.bootstrap, {"bad_batch_member"})
    assert any(r["reason"] == "bad_batch_member" and r["stage"] == "batch" for r in found)


async def test_a_merged_call_jev_did_not_write_or_cannot_read_is_dead_lettered_and_the_next_one_split(batch_app):
    """batch_merged is internal: an unsigned call (a broker writer without the key, English or Chinese) is refused
    as forged_record, a signed one that does not decode is bad_internal_message, and neither stops the reader."""
    producer = AIOKafkaProducer(bootstrap_servers=batch_app.bootstrap)
    await producer.start()
    topic = name("batch_merged")
    forged_call = orjson.dumps(
        {"job": "伪造", "template": "weekly", "sent": "merged", "shares": [], "output": "FORGED"}
    )
    garbage = "不是 JSON / not JSON".encode()
    try:
        await producer.send_and_wait(topic, forged_call, key=b"f")
        await producer.send_and_wait(topic, garbage, key=b"g", headers=signing.headers(topic, garbage))
    finally:
        await producer.stop()
    found = await rejections(batch_app.bootstrap, {"forged_record", "bad_internal_message"})
    reasons = {r["reason"] for r in found if r["stage"] == topic}
    assert reasons == {"forged_record", "bad_internal_message"}
    assert not any(
        r["reason"] == "forged_record" and "FORGED" not in r["original"] for r in found if r["stage"] == topic
    )


def test_a_members_tenant_is_folded_to_its_one_spelling_or_refused():
    line = {"job": "j", "member": "m", "kind": "store", "template": "weekly", "quota_tokens": 100}
    assert decode_member(orjson.dumps({**line, "tenant": "  Ｗａｙｎｅ "})).tenant == "wayne"
    with pytest.raises(ValueError, match="U\\+202E"):
        decode_member(orjson.dumps({**line, "tenant": "\u202ewayne"}))
