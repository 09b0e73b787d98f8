"""One tenant floods the model path with no rates configured (the first deployment's default), on the real local
broker with the real stages and a MiniLM scoring worker: another tenant's request sent right after the flood, in
English and in Chinese, is decided while most of the flood still waits. The flood is queued on the score topic
while the scoring worker is down, so the worker reads it with the other tenants' requests in one micro-batch, as a
busy worker does. (Before: the scoring worker delivered a
micro-batch's decisions only once all of it was decided, in arrival order, so a request behind a flood in the same
micro-batch waited for the whole flood: 1,000 flood requests took another tenant's p50 from 0.62-0.81 s to 42.6 s.)"""

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaConsumer

from schemas.records import Decision
from schemas.topics import name
from workers.analytics.lag import stage_lag
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration
FLOOD = 600


def request(tenant: str, request_id: str, state: str, candidates: list[str]) -> bytes:
    return orjson.dumps(
        {
            "request_id": request_id,
            "tenant": tenant,
            "service": "search",
            "decision_type": "ranking",
            "state": state,
            "candidates": [{"id": f"c{i}", "text": text} for i, text in enumerate(candidates)],
        }
    )


async def arrival_order(bootstrap: str, wanted: int, timeout: float) -> list[str]:
    """Request ids of the decisions topic in the order they arrive, until `wanted` distinct ones came by."""
    consumer = AIOKafkaConsumer(name("decisions"), bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    order: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while len(order) < wanted:
                for msgs in (await consumer.getmany(timeout_ms=200)).values():
                    order += [rid for m in msgs if (rid := Decision.loads(m.value).request_id) not in order]
    finally:
        await consumer.stop()
    return order


async def passed_on_to_scoring(settings, timeout: float = 120.0) -> None:
    """Until ingest and the cache stage have read (and so sent on) every request."""
    async with asyncio.timeout(timeout):
        while any(lag != 0 for lag in (await stage_lag(settings, [name("requests"), name("distilled")])).values()):
            await asyncio.sleep(0.5)


async def test_a_tenants_flood_without_rates_does_not_hold_another_tenants_decision_to_its_end(
    settings, clickhouse_dsn, usage_db
):
    flood = [
        request("flood", f"f{i}", f"warehouse {i} restock plan for pallet lot {i * 7919}", ["ship", "hold", "split"])
        for i in range(FLOOD)
    ]
    others = [
        request("acme", "acme-1", "trail running shoes for a wet mountain race", ["trail shoe", "leather loafer"]),
        request("阿里", "阿里-1", "给雨天山地越野赛挑一双跑鞋", ["越野跑鞋", "皮鞋"]),
    ]
    # the session's embedded ClickHouse: chdb binds one data directory per process
    settings = settings.replace(backend="auto", tenant_rates="", clickhouse_dsn=clickhouse_dsn)
    async with Pipeline(settings, known_decision_types()) as pipe:
        pipe.kill("scoring")
        await pipe.publish(flood + others)
        await passed_on_to_scoring(pipe.settings)
        await pipe.restart("scoring")
        order = await arrival_order(pipe.settings.bootstrap, FLOOD + len(others), timeout=240)
    flood_after = {rid: sum(1 for r in order[order.index(rid) :] if r.startswith("f")) for rid in ("acme-1", "阿里-1")}
    assert all(count >= FLOOD // 4 for count in flood_after.values()), flood_after
