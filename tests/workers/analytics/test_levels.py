"""The four levels on known usage (real embedded ClickHouse)."""

import datetime as dt

import pytest

from tests.workers.analytics.conftest import NOW, requests_at
from workers.analytics import levels

WEEK = NOW - dt.timedelta(days=7)


def test_request_level_percentiles_and_stage_split(load):
    client = load(requests_at(1, 10, 100), requests_at(2, 10, 300, prefix="big"))
    r = levels.request_level(client, WEEK, limit=3)
    assert r["requests"] == 20 and r["tokens"] == 4000
    assert r["tokens_by_stage"] == {"postprocess": 0, "score": 4000}
    assert r["tokens_per_request"]["p50"] in (100, 200, 300) and r["tokens_per_request"]["p99"] == pytest.approx(300)
    assert [t["tokens"] for t in r["top"]] == [300, 300, 300] and r["top"][0]["tier"] == "fine"


def test_session_level_is_a_rolling_24_hours(load):
    client = load(
        requests_at(2, 3, 100, session="s1", prefix="a"),
        requests_at(30, 5, 100, session="s1", prefix="b"),
        requests_at(3, 1, 50, session="s2", prefix="c"),
    )
    s = levels.session_level(client, NOW)
    assert s["sessions"] == 2
    assert [(t["session_id"], t["requests"], t["tokens"]) for t in s["top"]] == [("s1", 3, 300), ("s2", 1, 50)]


def test_service_level_per_hour_and_decision_type(load):
    client = load(
        requests_at(1, 4, 100),
        requests_at(1, 4, 500, service="payments", decision_type="risk", prefix="p"),
        requests_at(5, 2, 200, prefix="old"),
    )
    s = levels.service_level(client, WEEK)
    overall = {(r["service"], r["decision_type"]): r for r in s["overall"]}
    assert overall[("payments", "risk")]["p95"] == pytest.approx(500) and overall[("payments", "risk")]["requests"] == 4
    assert overall[("search", "ranking")]["requests"] == 6
    assert sorted((r["service"], r["requests"]) for r in s["hourly"]) == [("payments", 4), ("search", 2), ("search", 4)]


def test_business_level_tokens_per_event(load):
    client = load(requests_at(1, 4, 250), requests_at(1, 2, 1000, business_event="ticket_resolved", prefix="t"))
    b = {r["business_event"]: r for r in levels.business_level(client, WEEK)["overall"]}
    assert b["search_session"]["events"] == 4 and b["search_session"]["tokens_per_event"] == 250
    assert b["ticket_resolved"]["events_per_1k_tokens"] == pytest.approx(1.0)
    assert levels.business_level(client, WEEK)["weekly_leaderboard"][0]["business_event"] == "search_session"


@pytest.mark.parametrize(
    "by, key",
    [("service", "search"), ("decision_type", "ranking"), ("session", "s1"), ("business_line", "marketplace")],
)
def test_breakdown_sums_to_the_totals(load, by, key):
    client = load(requests_at(1, 5, 120, session="s1", nominal=200))
    rows = levels.breakdown(client, by, WEEK)
    assert [(r["key"], r["tokens"], r["saved_tokens"]) for r in rows] == [(key, 600, 400)]
    assert levels.totals(client, WEEK)["tokens"] == 600


def test_breakdown_rejects_unknown_dimension(usage_db):
    with pytest.raises(ValueError, match="choose one of"):
        levels.breakdown(usage_db, "user", WEEK)


def test_tier_shares_and_efficiency(load):
    client = load(
        requests_at(1, 6, 100, tier="cache_l1", prefix="c"),
        requests_at(1, 2, 100, tier="fine"),
        requests_at(1, 2, 100, tier="fallback", prefix="f"),
    )
    assert levels.tier_shares(client, WEEK) == {"cache_l1": 0.6, "fallback": 0.2, "fine": 0.2}
    eff = levels.efficiency(client, WEEK)
    assert eff == {"token_efficiency": 1.0, "cache_miss_rate": 0.4, "small_model_share": 0.8}


def test_by_model_puts_jevs_count_beside_the_servers(load):
    served = [
        e.derive(
            model="qwen-7b",
            server_input_tokens=105,
            server_cache_read_tokens=60,
            server_output_tokens=0,
            count_source="server",
        )
        for e in requests_at(1, 4, 100, prefix="srv")
        if e.stage == "score"
    ]
    client = load(requests_at(1, 3, 50, prefix="local"), served)
    by = levels.by_model(client, WEEK)
    assert by["qwen-7b"] == {
        "calls": 4,
        "tokens_jev": 400,
        "tokens_server": 420,
        "cached_tokens": 240,
        "drift": 0.05,
        "cached_claimed": 0,  # rows of no decide call: nothing claimed, nothing confirmed
        "cached_confirmed": 0,
        "cached_drift": None,
        "cost": pytest.approx(400e-6),
    }
    assert by["gpt-4o-mini"]["tokens_server"] is None and by["gpt-4o-mini"]["cached_tokens"] is None


def test_by_model_reconciles_the_cache_reads_jev_claimed_with_those_the_server_confirmed(load):
    """A decide call's fine row (its candidates) and the state_cache row split off it hold both counts; a generation
    on the same model claims nothing, so the cache reads the server reports for it confirm no claim."""
    decide, generation = [], []
    for e in requests_at(1, 4, 100, prefix="llm"):
        if e.stage != "score":
            continue
        served = dict(model="qwen-7b", count_source="server", server_output_tokens=0)
        decide.append(e.derive(candidates=3, server_input_tokens=40, **served))
        decide.append(
            e.derive(
                event_id=e.event_id + ":state_cache",
                stack=e.stack.replace(";fine", ";state_cache"),
                input_tokens=64,
                cache_read_tokens=64,
                server_input_tokens=60,
                server_cache_read_tokens=60,
                **served,
            )
        )
        generation.append(
            e.derive(
                event_id=e.event_id + ":generate",
                stack=e.stack.replace(";fine", ";generate"),
                server_input_tokens=100,
                server_cache_read_tokens=90,
                **served,
            )
        )
    row = levels.by_model(load(decide + generation), WEEK)["qwen-7b"]
    assert row["calls"] == 8  # 4 decide calls (a state_cache row is a part of one) and 4 generations
    assert (row["cached_claimed"], row["cached_confirmed"], row["cached_tokens"]) == (256, 240, 600)
    assert row["cached_drift"] == pytest.approx(240 / 256 - 1, abs=1e-4)
