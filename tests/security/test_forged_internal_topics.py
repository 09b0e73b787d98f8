"""A broker writer without the signing key forges the internal topics the issue found trusted, on the real local
broker with the real stages and scoring worker: a Work batch carrying a finished decision ("FORGED") on scored, a
Work naming globex on score, an L2 entry on cache_state. Each is refused, dead-lettered as forged_record and
counted in jev_forged_records_total; the forged decision reaches no tenant, the L1 cache or the requests-seen log,
and the forged work is neither scored nor billed. (Before: the FORGED text was delivered, cached and signed into
requests-seen; the score work was billed 48 tokens to globex; the cache-state entry was taken silently.)"""

import asyncio
import re
import time

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY

from schemas.topics import name
from streams.runtime.partitioning import partition_for
from tests.integration.test_idempotency_restart import records
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration


def forged_count(short: str) -> float:
    return REGISTRY.get_sample_value("jev_forged_records_total", {"topic": name(short)}) or 0.0


async def put(bootstrap: str, short: str, value: bytes, partition: int) -> None:
    """An unsigned record, as any client with write access to the broker could write it."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(name(short), value, partition=partition)
    finally:
        await producer.stop()


def ids_in(values: list[bytes]) -> set[str]:
    return {rid.decode() for v in values for rid in re.findall(rb'"request_id":"([^"]+)"', v)}


async def test_forged_records_on_scored_score_and_cache_state_are_refused_and_reach_no_tenant(
    settings, clickhouse_dsn, usage_db
):
    payloads = workload.generate(6, seed=49, repeat_share=0)
    # the session's embedded ClickHouse: chdb binds one data directory per process
    async with Pipeline(
        settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn), known_decision_types()
    ) as pipe:
        bootstrap, partitions = pipe.settings.bootstrap, pipe.settings.partitions
        await pipe.publish(payloads)
        decided, _ = await pipe.collect(len(payloads), 0, timeout=120)
        assert len(decided) == len(payloads)
        genuine = [w for b in await records(bootstrap, "scored") for w in orjson.loads(b)["items"]]
        assert genuine, "no request reached the scoring worker: the attack needs a real scored work to copy"
        before = {short: forged_count(short) for short in ("scored", "cache_state")}
        victim = genuine[0]  # as JSON: what a forger edits
        partition = partition_for(victim["cache_key"], partitions)
        # 1. a finished decision on scored, for a request id the tenant has not sent yet
        forged_decision = {**victim["decision"], "request_id": "r-forged", "action_id": "FORGED", "text": "FORGED"}
        planted = {**victim, "request": {**victim["request"], "request_id": "r-forged"}, "decision": forged_decision}
        await put(bootstrap, "scored", orjson.dumps({"items": [planted]}), partition)
        # 2. a work naming globex straight on score: no ingest, budget, rate or tenant-key check
        request = {**victim["request"], "request_id": "r-globex", "tenant": "globex"}
        await put(
            bootstrap, "score", orjson.dumps({"items": [{**victim, "request": request, "decision": None}]}), partition
        )
        # 3. an L2 entry on cache_state
        entry = {"origin": "forger", "records": [{"kind": "l2", "key": "x", "question": "FORGED", "answer": "FORGED"}]}
        await put(bootstrap, "cache_state", orjson.dumps(entry), 0)

        # the same request as the planted one, now sent for real: decided, never answered FORGED
        again = orjson.loads(
            next(p for p in payloads if orjson.loads(p)["request_id"] == victim["request"]["request_id"])
        )
        await pipe.publish([orjson.dumps({**again, "request_id": "r-forged"})])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            forged_count("scored") - before["scored"] < 1 or forged_count("cache_state") - before["cache_state"] < 1
        ):
            await asyncio.sleep(0.2)
        decisions, rejections = await pipe.collect(len(payloads) + 1, 2, timeout=60)

        assert decisions["r-forged"].text != "FORGED" and decisions["r-forged"].action_id != "FORGED"
        assert "r-globex" not in decisions
        assert all(d.text != "FORGED" for d in decisions.values())
        forged = sorted(r.stage for r in rejections if r.reason == "forged_record")
        assert forged == [name("score"), name("scored")]
        assert all("only Jev's processes" in r.detail for r in rejections if r.reason == "forged_record")
        assert forged_count("scored") - before["scored"] == 1
        assert forged_count("cache_state") - before["cache_state"] == 1
        seen = await records(bootstrap, "requests_seen")
        assert not any(b"FORGED" in v for v in seen)  # no signed first decision carrying it
        assert "r-globex" not in ids_in(await records(bootstrap, "usage"))  # neither scored nor billed
        assert not any(b"FORGED" in v for v in await records(bootstrap, "decisions"))
        assert not any(
            isinstance(v, bytes) and b"FORGED" in v for v in pipe.app.faust.tables["l1_cache"].values()
        )  # nor cached
