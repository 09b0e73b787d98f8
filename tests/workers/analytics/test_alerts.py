"""Each alert rule fires on usage built to cross its threshold, and stays quiet below it."""

import pytest

from schemas.records import Alert
from tests.workers.analytics.conftest import NOW, requests_at
from workers.analytics.alerts import Thresholds, evaluate_alerts


def rules(client, **changes):
    found = evaluate_alerts(client, Thresholds().replace(**changes), NOW)
    assert all(isinstance(a, Alert) and a.query.startswith("SELECT") and a.scope and a.message for a in found)
    return {a.rule: a for a in found}


def baseline_week(tokens=100, n=30):
    return [e for day in (2, 3, 4, 5) for e in requests_at(24 * day, n, tokens, prefix=f"d{day}")]


@pytest.mark.parametrize("recent_tokens, fires", [(130, True), (70, True), (110, False)])
def test_p95_drift_against_the_7_day_baseline(load, recent_tokens, fires):
    client = load(baseline_week(), requests_at(2, 30, recent_tokens))
    found = rules(client)
    assert ("p95_tokens_drift" in found) is fires
    if fires:
        a = found["p95_tokens_drift"]
        assert a.scope == "service=search decision_type=ranking"
        assert a.value == pytest.approx(recent_tokens / 100 - 1)


@pytest.mark.parametrize("limit, fires", [(5000, True), (6000, False)])
def test_session_over_its_24_hour_tokens(load, limit, fires):
    client = load(requests_at(3, 11, 500, session="s-heavy"), requests_at(30, 50, 500, session="s-heavy", prefix="x"))
    found = rules(client, session_tokens_24h=limit)
    assert ("session_tokens_24h" in found) is fires
    if fires:
        assert found["session_tokens_24h"].value == 5500 and "s-heavy" in found["session_tokens_24h"].scope


@pytest.mark.parametrize("budget, fires", [(1000, True), (1300, False)])
def test_decision_type_over_120_percent_of_daily_budget(load, budget, fires):
    client = load(requests_at(1, 5, 250), requests_at(20, 50, 250, prefix="yesterday"))
    found = rules(client, daily_budgets={"ranking": budget})
    assert ("daily_budget" in found) is fires


@pytest.mark.parametrize("spike, fires", [(400, True), (120, False)])
def test_p99_spike_in_the_last_hour(load, spike, fires):
    client = load(baseline_week(), requests_at(0.5, 25, 100, prefix="now"), requests_at(0.5, 5, spike, prefix="hot"))
    found = rules(client, p95_drift=10.0)
    assert ("p99_spike" in found) is fires


@pytest.mark.parametrize("fallbacks, fires", [(3, True), (1, False)])
def test_fallback_rate_above_5_percent(load, fallbacks, fires):
    client = load(requests_at(2, 40 - fallbacks, 100), requests_at(2, fallbacks, 0, tier="fallback", prefix="fb"))
    found = rules(client)
    assert ("fallback_rate" in found) is fires
    if fires:
        assert found["fallback_rate"].value == pytest.approx(fallbacks / 40)


@pytest.mark.parametrize("daily_tokens, fires", [((100, 150, 200, 300), True), ((100, 150, 150, 300), False)])
def test_business_efficiency_falling_three_days_in_a_row(load, daily_tokens, fires):
    days = [requests_at(24 * (3 - d) + 0.1, 10, tokens, prefix=f"day{d}") for d, tokens in enumerate(daily_tokens)]
    found = rules(load(*days), p95_drift=10.0, tail_spike_ratio=100.0)
    assert ("business_efficiency_falling" in found) is fires


def test_quiet_usage_raises_nothing(load):
    assert rules(load(baseline_week(), requests_at(2, 30, 100))) == {}


def served_calls(claimed: int, confirmed: int, server_input: int, n: int = 20) -> list:
    """n decide calls to a served model in the last 15 minutes: each a fine row (100 tokens on Jev's count) and a
    state_cache row with the cache reads Jev claimed and those the server confirmed."""
    out = []
    for e in requests_at(0.1, n, 100, prefix=f"srv{claimed}-{confirmed}-{server_input}"):
        if e.stage != "score":
            continue
        served = dict(model="smollm2-vllm", count_source="server")
        out.append(e.derive(candidates=3, server_input_tokens=server_input, **served))
        out.append(
            e.derive(
                event_id=e.event_id + ":state_cache",
                stack=e.stack.replace(";fine", ";state_cache"),
                input_tokens=claimed,
                cache_read_tokens=claimed,
                server_input_tokens=confirmed,
                server_cache_read_tokens=confirmed,
                **served,
            )
        )
    return out


@pytest.mark.parametrize("confirmed, fires", [(64, False), (62, False), (60, True), (68, True)])
def test_cache_reads_the_server_confirmed_off_jevs_claim_beyond_5_percent(load, confirmed, fires):
    # the server's count of the calls' tokens moves with its cache reads: 100 + 64 against 100 + confirmed ± 2.4%
    client = load(served_calls(64, confirmed, 100))
    found = rules(client)
    assert ("cache_read_drift" in found) is fires
    assert "token_count_drift" not in found
    if fires:
        a = found["cache_read_drift"]
        assert a.scope == "model=smollm2-vllm" and a.value == pytest.approx(confirmed / 64 - 1, abs=1e-4)
        assert "shared_context" in a.message and a.threshold == 0.05


@pytest.mark.parametrize("calls, fires", [(20, True), (5, False)])  # under min_requests rows: no rate alert
def test_the_servers_token_count_off_jevs_beyond_5_percent(load, calls, fires):
    found = rules(load(served_calls(64, 64, 112, n=calls)))
    assert ("token_count_drift" in found) is fires and "cache_read_drift" not in found
    if fires:
        assert found["token_count_drift"].value == pytest.approx((112 + 64) / 164 - 1, abs=1e-4)
