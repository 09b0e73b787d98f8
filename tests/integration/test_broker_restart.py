"""Broker restart: the worker processes reconnect on their own and go on deciding, idle and under load.

The local tansu broker stores in memory, so a restarted broker has lost its topics, committed offsets and
groups. What reconnecting can show then: the same Faust stage process and scoring worker, neither restarted,
rejoin their groups on the broker that came back on the same port (topics recreated, as `jev broker` does
at start) and decide, meter and commit new requests, and lag is reported again for their groups.
"""

import asyncio
import time

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from infra.broker import create_topics
from schemas.records import Control
from schemas.topics import TOPICS, name
from streams.runtime.control import publish
from workers.analytics.lag import partition_lag, stage_lag
from workers.harness import workload
from workers.harness.chaos import Collector, run_audit, wait_drained
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration


async def decide(pipe: Pipeline, payloads: list[bytes], expected: set[str], timeout: float) -> set[str]:
    collector = Collector(pipe.settings.bootstrap)
    following = asyncio.create_task(collector.run())
    await pipe.publish(payloads)
    await collector.wait_for(expected, timeout, poll_s=0.2)
    collector.stopping.set()
    await following
    return expected & collector.decisions.keys()


async def wait_live(pipe: Pipeline, timeout: float) -> str:
    """Publish a probe request every few seconds until one is decided: both groups are back."""
    deadline = time.monotonic() + timeout
    for n in range(1000):
        probe = workload.generate(1, seed=100 + n, repeat_share=0)
        if await decide(pipe, probe, {f"r-{100 + n}-0"}, timeout=5):
            return f"r-{100 + n}-0"
        assert time.monotonic() < deadline, "no probe decided after the broker restart"


async def test_workers_reconnect_and_decide_after_the_broker_restarts(settings):
    before, after = workload.generate(20, seed=21, repeat_share=0), workload.generate(20, seed=22, repeat_share=0)
    ids = [{f"r-{seed}-{i}" for i in range(20)} for seed in (21, 22)]
    async with Pipeline(settings.replace(backend="lexical"), known_decision_types(), stages_process=True) as pipe:
        pids = (pipe.stages.pid, pipe.scoring.pid)
        assert await decide(pipe, before, ids[0], timeout=120) == ids[0]
        assert not any((await wait_drained(pipe, timeout=60)).values())  # usage stored, offsets committed

        pipe.broker.stop()
        await asyncio.sleep(3)  # the workers see the broker gone: connection errors, coordinator dead
        pipe.broker.start()  # same port, nothing in it
        await create_topics(pipe.settings.bootstrap, [t.name for t in TOPICS.values()], pipe.settings.partitions)
        await wait_live(pipe, timeout=120)
        assert await decide(pipe, after, ids[1], timeout=120) == ids[1]
        assert not any((await wait_drained(pipe, timeout=60)).values())
        groups = {r["group"] for r in await partition_lag(pipe.settings.bootstrap)}
        assert {pipe.settings.app_id, f"{pipe.settings.app_id}-scoring"} <= groups  # both rejoined and committed
        assert (pipe.stages.pid, pipe.scoring.pid) == pids and pipe.stages.poll() is None is pipe.scoring.poll()
        assert pipe.restarts == {"faust": 0, "scoring": 0}
        await pipe.stop_stages()
        totals = await run_audit(pipe)
    metered = totals["per_request"]
    assert all(metered.get(r) == [1, 1] for r in ids[0] | ids[1])  # ingest and postprocess events, once each
    assert totals["raw_rows"] == totals["distinct_events"]


class Upstream:
    """An upstream system publishing requests at a steady rate, as Kafka clients do: a send the broker did not
    acknowledge is sent again until it is (the broker being down included), and `run(ids=...)` publishes
    requests again by id (at-least-once: the same bytes, so Jev decides each once)."""

    def __init__(self, bootstrap: str, payloads: list[bytes]):
        self.bootstrap = bootstrap
        self.payloads = {orjson.loads(p)["request_id"]: p for p in payloads}
        self.acked: dict[str, float] = {}  # request id -> time.monotonic() of its first acknowledgement
        self.retried = 0  # sends refused (the producer gave up inside 10 s) and sent again
        self.held = 0  # sends the producer held over 1 s before the broker acknowledged them

    async def send(self, producer: AIOKafkaProducer, request_id: str) -> None:
        while True:
            try:
                began = time.monotonic()
                await asyncio.wait_for(producer.send_and_wait(name("requests"), self.payloads[request_id]), 10)
                self.acked.setdefault(request_id, time.monotonic())
                self.held += time.monotonic() - began > 1.0
                return
            except (TimeoutError, KafkaError):
                self.retried += 1
                await asyncio.sleep(0.5)

    async def run(self, per_s: float, ids: list[str] | None = None) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for request_id in ids if ids is not None else list(self.payloads):
                await self.send(producer, request_id)
                await asyncio.sleep(1 / per_s)
        finally:
            await producer.stop()


async def test_the_pipeline_recovers_from_a_broker_restart_under_load(settings):
    """The broker stops for 3 s and comes back empty while requests flow, the stage process, the scoring worker
    and the usage sink all busy, and a hard budget (10⁹ tokens, so none is refused) lends leases. Nothing is
    restarted by hand but the broker: producers retry, consumers rejoin and read the new logs from their start,
    the lease client asks its new owner, and every request is decided and metered once. The upstream sends again
    what it has no decision for once the flow is back, as an at-least-once client does: the in-memory broker
    lost what it held; a Kafka broker keeps it."""
    payloads = workload.generate(240, seed=23, repeat_share=0)
    upstream = Upstream("", payloads)
    ids = set(upstream.payloads)
    async with Pipeline(
        settings.replace(backend="lexical"), known_decision_types(), stages_process=True, metrics=True
    ) as pipe:
        upstream.bootstrap = pipe.settings.bootstrap
        await publish(
            pipe.settings.bootstrap,
            [Control(kind="budget", key="tenant:acme", value={"hard_tokens": 10**9}, ts=time.time())],
        )
        collector = Collector(pipe.settings.bootstrap)
        following = asyncio.create_task(collector.run())
        flowing = asyncio.create_task(upstream.run(per_s=40))
        while len(collector.decisions) < 60:
            await asyncio.sleep(0.05)
        lag = await stage_lag(pipe.settings, [name("requests"), name("usage")])
        pipe.broker.stop()
        await asyncio.sleep(3)
        pipe.broker.start()
        await create_topics(pipe.settings.bootstrap, [t.name for t in TOPICS.values()], pipe.settings.partitions)
        back = time.monotonic()
        await flowing
        sent_after = {r for r, at in upstream.acked.items() if at > back}
        late = await collector.wait_for(sent_after, back + 60 - time.monotonic(), poll_s=0.2)
        assert not late, f"{len(late)} of {len(sent_after)} requests sent after the broker came back undecided"
        recovered_s = max(collector.first_seen[r] for r in sent_after) - back
        undecided = sorted(ids - collector.decisions.keys() - {r.request_id for r in collector.rejections.values()})
        await upstream.run(per_s=200, ids=undecided)
        await collector.wait_for(ids, 60, poll_s=0.2)
        assert not any((await wait_drained(pipe, timeout=60)).values())
        metrics = pipe.scrape_metrics()
        collector.stopping.set()
        await following
        assert pipe.restarts == {"faust": 0, "scoring": 0} and pipe.stages.poll() is None is pipe.scoring.poll()
        await pipe.stop_stages()
        totals = await run_audit(pipe)
    assert any(lag.values()), f"the pipeline had work queued when the broker stopped: {lag}"
    # the outage met the upstream's sends: refused and sent again, or held by the producer until the broker was back
    assert upstream.retried or upstream.held, "no send was in flight while the broker was down"
    assert len(sent_after) > 20 and recovered_s < 30, (len(sent_after), recovered_s)
    assert ids <= collector.decisions.keys(), f"undecided: {sorted(ids - collector.decisions.keys())[:10]}"
    assert not collector.rejections, {r.reason for r in collector.rejections.values()}  # no over_budget
    assert not collector.differing
    metered = totals["per_request"]
    assert {r: metered.get(r) for r in ids if metered.get(r) != [1, 1]} == {}  # each ingest, postprocess event once
    assert totals["raw_rows"] == totals["distinct_events"] and totals["raw_tokens"] == totals["final_tokens"]
    restarts = [
        line
        for text in metrics.values()
        for line in text.splitlines()
        if line.startswith("jev_log_restarts_total{") and not line.endswith(" 0.0")
    ]
    assert restarts, "jev_log_restarts_total counts the partitions read again after the restart"
