"""A tenant limited to 5 requests/s got 9.2/s through two stage processes: each ingest process had its own buckets
at the whole rate. Now each process admits its share of the rate, the share of the requests topic's partitions
it reads (a tenant's requests are keyed by request or session id, so they spread over the partitions). Two
consumers in one group on the real local broker split the topic, and their limiters, fed what each was handed
(by the requests' own timestamps, so the count does not depend on the machine's speed), admit the rate between
them, not twice it."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka import AIOKafkaProducer

from streams.ingest.fairness import BURST_S, Rate, TenantLimiter
from streams.runtime.agents.ingest import held_partitions
from streams.runtime.consumer import BatchConsumer
from tests.conftest import fresh_topic

RATE = 5.0  # requests/s of tenant acme
OFFERED, SPAN_S = 200, 10.0  # requests sent, spread evenly over this many seconds: 4× the rate


async def until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_two_ingest_processes_admit_a_tenants_rate_between_them(broker):
    topic = "test.fleet_rates"
    bootstrap = await fresh_topic(broker, topic, 4)
    limiters = [TenantLimiter({"acme": Rate(RATE, 0)}) for _ in range(2)]
    handed: list[list[float]] = [[], []]  # the timestamps (s) of what each process was handed

    def handler(i: int):
        async def handle(messages):
            limiters[i].hold(*held_partitions(consumers[i]))
            handed[i] += [m.timestamp / 1000 for m in messages]

        return handle

    consumers = [BatchConsumer(bootstrap, topic, "fleet-rates", handler(i), max_records=500, wait_ms=5) for i in (0, 1)]
    for consumer in consumers:
        await consumer.start()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await until(lambda: [held_partitions(c) for c in consumers] == [(2, 4), (2, 4)])
        start_ms = int(time.time() * 1000)
        for i in range(OFFERED):  # keyed as JevClient keys a request without a session: by its request id
            key = str(uuid.uuid4()).encode()
            await producer.send(topic, b"{}", key=key, timestamp_ms=start_ms + int(i * SPAN_S * 1000 / OFFERED))
        await producer.flush()
        await until(lambda: sum(map(len, handed)) == OFFERED)
    finally:
        await producer.stop()
        for consumer in consumers:
            await consumer.stop()
    assert all(limiter.share == 0.5 for limiter in limiters) and all(handed)
    admitted = [sum(limiter.check("acme", t) is None for t in sorted(ts)) for limiter, ts in zip(limiters, handed)]
    most = RATE * SPAN_S + RATE * BURST_S  # the rate over the span, and one burst across the fleet
    assert 0.8 * RATE * SPAN_S <= sum(admitted) <= most + 2, admitted  # before: about twice the rate


def test_a_share_change_rescales_the_buckets_and_an_unknown_share_keeps_them():
    limiter = TenantLimiter({"acme": Rate(8, 1000)})
    assert limiter.check("acme", 0.0) is None  # a lone process: the whole rate
    limiter.hold(1, 4, now=0.0)
    requests, tokens = limiter.buckets["acme"]
    assert (requests.rate, requests.capacity, tokens.rate) == (2.0, 2.0, 250.0)
    limiter.hold(0, 4, now=0.0)  # during a rebalance: nothing held, the share stays
    assert limiter.share == 0.25
    low = TenantLimiter({"acme": Rate(1, 0)})
    low.hold(1, 16, now=0.0)  # a small share of a low rate still admits a request now and then
    assert low.check("acme", 0.0) is None and low.check("acme", 1.0) is not None
    assert low.check("acme", 16.0) is None
