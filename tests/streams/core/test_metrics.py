"""Prometheus metrics: bounded labels, the observe_* helpers, and the /metrics endpoint."""

import socket
import urllib.request

import pytest
from prometheus_client import REGISTRY

from schemas.records import Decision
from streams.core import metrics
from workers.analytics.sample import usage_events


def value(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_labels_are_capped_then_other(monkeypatch):
    monkeypatch.setattr(metrics, "_seen", {})
    monkeypatch.setattr(metrics, "MAX_LABEL_VALUES", 3)
    assert [metrics.bounded("x", v) for v in "abcab"] == ["a", "b", "c", "a", "b"]
    assert metrics.bounded("x", "d") == "other"


def test_observe_sink_counts_tokens_by_kind_and_rows():
    events = usage_events(5, 1.7e9)
    before = {
        k: value("jev_tokens_total", stage="score", kind=k, decision_type=events[0].decision_type)
        for k in ("input", "nominal")
    }
    rows_before = value("jev_usage_rows_total", result="duplicate")
    mine = [e for e in events if e.decision_type == events[0].decision_type and e.stage == "score"]
    metrics.observe_sink(events, dropped=2, seconds=0.01)
    assert value("jev_tokens_total", stage="score", kind="input", decision_type=events[0].decision_type) - before[
        "input"
    ] == sum(e.input_tokens for e in mine)
    assert value("jev_tokens_total", stage="score", kind="nominal", decision_type=events[0].decision_type) - before[
        "nominal"
    ] == sum(e.nominal_tokens for e in mine)
    assert value("jev_usage_rows_total", result="duplicate") - rows_before == 2


def test_the_billed_count_and_its_drift_per_model():
    base = usage_events(1, 1.7e9)[0]
    served = [
        base.derive(
            model="drift-test-model",
            input_tokens=100,
            output_tokens=0,
            server_input_tokens=104,
            server_output_tokens=1,
            count_source="server",
        ),
        base.derive(model="drift-test-model", input_tokens=50, output_tokens=10, count_source="jev"),
        base.derive(
            model="drift-test-model", input_tokens=40, output_tokens=0, server_input_tokens=40, count_source="missing"
        ),
    ]
    metrics.observe_sink(served, dropped=0, seconds=0.01)
    assert value("jev_model_tokens_total", model="drift-test-model", count="jev") == 200
    assert value("jev_model_tokens_total", model="drift-test-model", count="billed") == 205
    # the drift compares the counts of the call the server reported on only
    assert value("jev_token_count_drift", model="drift-test-model") == pytest.approx(105 / 100 - 1)


def test_cache_reads_claimed_and_confirmed_per_model_and_their_drift():
    base = usage_events(1, 1.7e9)[0].derive(model="cache-drift-model", count_source="server", candidates=0)
    metrics.observe_sink(
        [
            base.derive(stack="t;s;ranking;score;fine", candidates=3, input_tokens=40, server_input_tokens=44),
            base.derive(
                stack="t;s;ranking;score;state_cache",
                input_tokens=64,
                cache_read_tokens=64,
                server_input_tokens=48,
                server_cache_read_tokens=48,
            ),
            # a generation claims nothing: the server's cache reads on it confirm no claim
            base.derive(stack="t;s;support;score;stream", input_tokens=30, server_cache_read_tokens=16),
        ],
        dropped=0,
        seconds=0.01,
    )
    assert value("jev_model_cache_read_tokens_total", model="cache-drift-model", count="claimed") == 64
    assert value("jev_model_cache_read_tokens_total", model="cache-drift-model", count="confirmed") == 48
    assert value("jev_cache_read_drift", model="cache-drift-model") == pytest.approx(48 / 64 - 1)
    assert value("jev_token_count_drift", model="cache-drift-model") == pytest.approx(92 / 134 - 1)


@pytest.mark.parametrize("tier", ["fine", "cache_l1", "fallback"])
def test_observe_decision_counts_tier(tier):
    before = value("jev_decisions_total", tier=tier, decision_type="ranking")
    metrics.observe_decision(Decision(request_id="r", tier=tier), "ranking")
    assert value("jev_decisions_total", tier=tier, decision_type="ranking") - before == 1


def test_stage_latency_runs_from_the_requests_arrival():
    count = value("jev_stage_latency_seconds_count", stage="score")
    total = value("jev_stage_latency_seconds_sum", stage="score")
    metrics.observe_stage("score", admitted_at=100.0, now=100.75)
    assert value("jev_stage_latency_seconds_count", stage="score") - count == 1
    assert value("jev_stage_latency_seconds_sum", stage="score") - total == pytest.approx(0.75)


def test_known_series_exist_at_zero_and_switches_show_their_state():
    metrics.declare_known_series()
    assert REGISTRY.get_sample_value("jev_usage_rows_total", {"result": "inserted"}) is not None
    assert REGISTRY.get_sample_value("jev_breaker_trips_total", {"breaker": "token_cap"}) is not None
    metrics.observe_switches({"cache.l2": False, "cache.l1": True})
    assert value("jev_switch_on", switch="cache.l2") == 0 and value("jev_switch_on", switch="cache.l1") == 1


def test_cache_fallback_breaker_and_lag_helpers():
    hits = value("jev_cache_lookups_total", level="l2", result="hit")
    metrics.observe_cache("l2", True)
    metrics.observe_fallback("deadline")
    metrics.observe_breaker("token_cap")
    metrics.set_consumer_lag("jev", "jev.usage.v1", 42)
    assert value("jev_cache_lookups_total", level="l2", result="hit") - hits == 1
    assert value("jev_consumer_lag_messages", group="jev", topic="jev.usage.v1") == 42
    assert value("jev_fallbacks_total", reason="deadline") >= 1
    assert value("jev_breaker_trips_total", breaker="token_cap") >= 1


def test_metrics_server_serves_metrics(settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert metrics.start_metrics_server(settings.replace(metrics_port=0)) is False
    assert metrics.start_metrics_server(settings.replace(metrics_port=port)) is True
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {metrics.bearer_token(settings)}"}
    )
    body = urllib.request.urlopen(request, timeout=5).read().decode()
    assert "jev_decisions_total" in body and "jev_stage_latency_seconds_bucket" in body
