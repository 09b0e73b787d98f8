"""Idempotency by (tenant, request_id) holds across a restart of the stage process, on the real local broker: the
stage process is killed and started again, the same requests are published again, and each gets its first
decision again with no new work (nothing more on the distilled or score topics), no new usage and no budget
reservation; other content under a decided id is rejected (duplicate_request_id). The new process learned all of
it from the requests-seen topic (streams.idempotency.requests), not from its own memory."""

import asyncio
import re
import time

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from schemas.topics import name
from workers.harness import workload
from workers.harness.chaos import Collector, wait_drained
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration
SEED, N = 41, 6


async def records(bootstrap: str, short: str, quiet_s: float = 2.0) -> list[bytes]:
    """Every value on topic `short`, read from its beginning until it has been quiet for `quiet_s`."""
    consumer = AIOKafkaConsumer(
        name(short),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=16 << 20,
    )
    await consumer.start()
    values, last = [], time.monotonic()
    try:
        while time.monotonic() - last < quiet_s:
            polled = await consumer.getmany(timeout_ms=200)
            for msgs in polled.values():
                values += [m.value for m in msgs]
                last = time.monotonic()
    finally:
        await consumer.stop()
    return values


def mentions(values: list[bytes], ids: set[str]) -> int:
    """How many of `ids` each value names (work envelopes and usage batches carry many requests), summed."""
    return sum(1 for v in values for rid in re.findall(rb'"request_id":"([^"]+)"', v) if rid.decode() in ids)


async def collect(pipe: Pipeline, payloads: list[bytes], done, timeout: float) -> Collector:
    """Publish `payloads` and follow the decisions and rejected topics until `done(collector)`, then 1 s more
    (anything beyond what was expected would land then)."""
    collector = Collector(pipe.settings.bootstrap)
    following = asyncio.create_task(collector.run())
    await pipe.publish(payloads)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not done(collector):
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)
    collector.stopping.set()
    await following
    return collector


def delivered(ids: set[str], times: int):
    return lambda c: all(c.deliveries.get(i, 0) >= times for i in ids)


async def test_a_redelivery_after_the_stage_process_restarts_gets_the_first_decision_and_spends_nothing(settings):
    payloads = workload.generate(N, seed=SEED, repeat_share=0)
    ids = {f"r-{SEED}-{i}" for i in range(N)}
    async with Pipeline(settings.replace(backend="lexical"), known_decision_types(), stages_process=True) as pipe:
        first = await collect(pipe, payloads, delivered(ids, 1), timeout=120)
        assert {i: first.deliveries.get(i) for i in ids} == {i: 1 for i in ids}
        assert not any((await wait_drained(pipe, timeout=60)).values())  # usage stored, offsets committed
        bootstrap = pipe.settings.bootstrap
        spent = {short: mentions(await records(bootstrap, short), ids) for short in ("distilled", "score", "usage")}
        assert spent["usage"] >= N and spent["distilled"] + spent["score"] > 0

        killed = pipe.kill("faust")
        await pipe.restart("faust")
        assert pipe.stages.pid != killed
        again = await collect(pipe, payloads, delivered(ids, 2), timeout=120)

        assert {i: again.deliveries.get(i) for i in ids} == {i: 2 for i in ids}  # each answered once more
        copies: dict[str, list[dict]] = {}
        for value in await records(bootstrap, "decisions"):
            decision = orjson.loads(value)
            if decision["request_id"] in ids:
                copies.setdefault(decision["request_id"], []).append(decision)
        assert all(len(c) == 2 and c[0] == c[1] for c in copies.values()), "a redelivery got another decision"
        assert {
            short: mentions(await records(bootstrap, short), ids) for short in ("distilled", "score", "usage")
        } == spent  # no new work, no new usage
        changed = orjson.dumps({**orjson.loads(payloads[0]), "state": "other content under a decided id"})
        await pipe.publish([changed])
        deadline, reasons = time.monotonic() + 60, []
        while "duplicate_request_id" not in reasons and time.monotonic() < deadline:
            reasons = [
                r["reason"]
                for r in map(orjson.loads, await records(bootstrap, "rejected", quiet_s=1.0))
                if r.get("request_id") == f"r-{SEED}-0"
            ]
        assert reasons == ["duplicate_request_id"]
