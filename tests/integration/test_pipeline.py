"""The whole pipeline on the real local broker and the real ClickHouse engine."""

import pytest

from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration


async def test_every_request_decided_once_and_metered(settings, clickhouse_dsn, usage_db):
    payloads = workload.generate(60, seed=3)
    expected = {f"r-3-{i}" for i in range(60)}
    settings = settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn)
    async with Pipeline(settings, known_decision_types()) as pipe:
        await pipe.publish(payloads[:30] + workload.BAD_INPUTS)
        await pipe.collect(30, len(workload.BAD_INPUTS), timeout=120)
        await pipe.publish(payloads[30:])
        decisions, rejections = await pipe.collect(60, len(workload.BAD_INPUTS), timeout=120)
        await pipe.wait_usage_rows(at_least=3 * 60)
        rows = pipe.ch.query(
            "SELECT request_id, sum(input_tokens), sum(cache_read_tokens), sum(output_tokens), "
            "countIf(stage = 'postprocess') FROM usage_events FINAL WHERE stage != 'shadow' "
            "GROUP BY request_id"
        ).result_rows

    assert set(decisions) == expected
    assert sorted(r.reason for r in rejections) == [
        "bad_json",
        "missing_field",
        "missing_field",
        "unknown_decision_type",
    ]
    assert all(r.original for r in rejections)
    tiers = {d.tier for d in decisions.values()}
    assert {"rules", "fine", "cache_l1"} <= tiers
    metered = {r[0]: r[1:] for r in rows if "~l3~" not in r[0]}  # L3 pre-answers are metered under their own ids
    assert set(metered) == expected
    assert all(r[0].split("~l3~")[0] in expected for r in rows)
    for rid, d in decisions.items():
        assert metered[rid][:3] == (d.input_tokens, d.cache_read_tokens, d.output_tokens), rid
        assert metered[rid][3] == 1


async def test_raw_text_opt_in_stores_each_admitted_request_apart(settings, clickhouse_dsn, usage_db):
    payloads = workload.generate(10, seed=5)
    settings = settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn, raw_text_days=2)
    try:
        async with Pipeline(settings, known_decision_types()) as pipe:
            await pipe.publish(payloads + workload.BAD_INPUTS[:1])
            await pipe.collect(10, 1, timeout=120)
            rows = pipe.ch.query("SELECT request_id, state FROM request_texts ORDER BY request_id").result_rows
            ttl = pipe.ch.query("SHOW CREATE TABLE request_texts").result_rows[0][0]
    finally:
        usage_db.command("DROP TABLE IF EXISTS request_texts")
    assert sorted(r[0] for r in rows) == sorted(f"r-5-{i}" for i in range(10))
    assert all(r[1] for r in rows)
    assert "toIntervalDay(2)" in ttl


async def test_a_request_near_the_size_limit_is_decided(settings, clickhouse_dsn, usage_db):
    """A ~1 MB request makes a Work over 1 MB on every internal hop (the request travels whole): the
    producers' message limit must take it, and envelopes around it stay bounded."""
    import orjson

    small = workload.generate(20, seed=6)
    big = orjson.loads(small[0]) | {
        "request_id": "big",
        "history": [
            {"role": "user", "content": f"turn {i}: " + "the order arrived late and the box was damaged " * 40}
            for i in range(500)
        ],
    }
    raw = orjson.dumps(big)
    settings = settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn, max_record_bytes=1_048_576)
    assert 900_000 < len(raw) < settings.max_record_bytes
    async with Pipeline(settings, known_decision_types()) as pipe:
        await pipe.publish([raw] + small[1:])
        decisions, _ = await pipe.collect(20, 0, timeout=120)
    assert "big" in decisions and decisions["big"].tier != "fallback"
