"""Broker restart: the worker processes reconnect on their own and go on deciding.

The local tansu broker stores in memory, so a restarted broker has lost its topics, committed offsets and
groups. What reconnecting can show then: the same Faust stage process and scoring worker, neither restarted,
rejoin their groups on the broker that came back on the same port (topics recreated, as `jev broker` does
at start) and decide, meter and commit new requests, and lag is reported again for their groups.
"""
import asyncio
import time

import pytest

from infra.broker import create_topics
from schemas.topics import TOPICS
from workers import workload
from workers.chaos import Collector, run_audit, wait_drained
from workers.lag import partition_lag
from workers.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration


async def decide(pipe: Pipeline, payloads: list[bytes], expected: set[str], timeout: float) -> set[str]:
    collector = Collector(pipe.settings.bootstrap)
    following = asyncio.create_task(collector.run())
    await pipe.publish(payloads)
    deadline = time.monotonic() + timeout
    while not expected <= collector.decisions.keys() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    collector.stopping.set()
    await following
    return expected & collector.decisions.keys()


async def wait_live(pipe: Pipeline, timeout: float) -> str:
    """Publish a probe request every few seconds until one is decided: both groups are back. Requests sent to
    an emptied broker before that can land below a consumer's old in-memory offsets and be skipped (tansu
    keeps nothing across a restart; a real Kafka keeps topics and committed offsets)."""
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
