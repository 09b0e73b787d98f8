"""Every kill switch can be turned off at runtime through the control topic and the pipeline keeps answering."""
import asyncio

import orjson
import pytest

from streams.control import publish
from streams.switches import SWITCHES, switch_record
from workers import workload
from workers.chaos import Collector
from workers.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration
ROUND = 12


def renamed(payloads: list[bytes], tag: str) -> tuple[list[bytes], set[str]]:
    """The same requests (so the L1 cache could answer them) under new request ids."""
    bodies = [{**orjson.loads(p), "request_id": f"{tag}-{i}"} for i, p in enumerate(payloads)]
    return [orjson.dumps(b) for b in bodies], {b["request_id"] for b in bodies}


async def decided(pipe: Pipeline, collector: Collector, payloads: list[bytes], ids: set[str], timeout=120.0):
    await pipe.publish(payloads)
    for _ in range(int(timeout / 0.2)):
        if ids <= collector.decisions.keys():
            break
        await asyncio.sleep(0.2)
    return {i: collector.decisions[i] for i in ids if i in collector.decisions}


async def test_pipeline_answers_with_each_switch_off(settings):
    base = workload.generate(ROUND, seed=5, repeat_share=0.0)
    async with Pipeline(settings.replace(backend="lexical"), known_decision_types(), stages_process=True) as pipe:
        collector = Collector(pipe.settings.bootstrap)
        following = asyncio.create_task(collector.run())
        try:
            warm, ids = renamed(base, "warm")
            assert len(await decided(pipe, collector, warm, ids)) == ROUND  # fills the L1 cache
            for switch in SWITCHES:
                await publish(pipe.settings.bootstrap, [switch_record(switch, False)])
                await asyncio.sleep(1.5)  # readers poll every 200 ms
                payloads, ids = renamed(base, f"off-{switch}")
                got = await decided(pipe, collector, payloads, ids)
                assert set(got) == ids, f"{switch} off: {len(ids - set(got))} requests got no decision"
                if switch == "cache.l1":
                    assert not any(d.tier == "cache_l1" for d in got.values()), "cache.l1 off still served hits"
                await publish(pipe.settings.bootstrap, [switch_record(switch, True)])
            await asyncio.sleep(1.5)
            payloads, ids = renamed(base, "back-on")
            got = await decided(pipe, collector, payloads, ids)
            assert set(got) == ids and any(d.tier == "cache_l1" for d in got.values())  # on again, no restart
        finally:
            collector.stopping.set()
            await following
