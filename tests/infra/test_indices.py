"""The efficiency indices (TE, CP, HR, PE) from the indices_by_minute view, against the same figures computed
row by row from usage_events; TE as Prometheus computes it, against ClickHouse's; and their thresholds in
Prometheus agree with the JEV_INDEX_* defaults."""

import datetime as dt
import re
import time
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from streams.runtime.usage_sink import UsageSink
from streams.settings import Settings
from streams.usage.events import event
from workers.analytics import levels
from workers.analytics.alerts import Thresholds, efficiency_indices
from workers.analytics.sample import usage_events

ROOT = Path(__file__).resolve().parents[2]


def test_indices_match_the_events_they_come_from(usage_db):
    events = usage_events(300, time.time())
    for i, e in enumerate(events):
        if e.stage == "ingest":
            e.prompt_bytes, e.compact_bytes = 300 + i % 7, 200
    pre = events[-1].__class__.from_data(
        {
            **events[-1].asdict(),
            "request_id": "x~l3~0",
            "event_id": "x~l3~0:pp",
            "stage": "postprocess",
            "outcome": "fine",
            "stack": "t;s;d;postprocess",
        }
    )
    UsageSink(usage_db).insert(events + [pre])
    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    got = levels.index_values(usage_db, since)
    decisions = [e for e in events if e.stage == "postprocess" and e.stack.endswith(";postprocess")]
    tiers = [e.outcome for e in decisions]
    total = sum(e.input_tokens + e.output_tokens for e in events + [pre])
    wasted = sum(
        e.input_tokens + e.output_tokens
        for e in events
        if e.outcome == "fallback" or (e.stage == "postprocess" and e.stack.split(";")[-1] in ("retry", "cleanup"))
    )
    assert got["decisions"] == len(decisions) and got["pre_answers"] == 1
    assert got["te"] == round(1 - wasted / total, 4)
    assert got["cp"] == round(sum(t in ("coarse", "fine", "llm", "fallback") for t in tiers) / len(tiers), 4)
    assert got["hr"] == round(1 - sum(t in ("fine", "llm") for t in tiers) / len(tiers), 4)
    sent = sum(e.prompt_bytes for e in events)
    assert got["pe"] == round(sent / sum(e.compact_bytes for e in events), 4)
    view = usage_db.query("SELECT te, cp, hr, pe FROM efficiency_indices(since = 0)").result_rows[0]
    assert [round(v, 4) for v in view] == [got["te"], got["cp"], got["hr"], got["pe"]]
    shown = levels.indices(usage_db, since, Settings())
    assert set(shown) == {"te", "cp", "hr", "pe"} and shown["pe"]["healthy"] == [None, 1.8]
    assert shown["cp"]["status"] == ("high" if got["cp"] > 0.15 else "ok")


def metered(name: str, keep=lambda labels: True) -> float:
    return sum(s.value for family in REGISTRY.collect() for s in family.samples if s.name == name and keep(s.labels))


def te_parts() -> tuple[float, float]:
    """TE's numerator and denominator as the recording rule jev:token_efficiency:ratio15m reads them."""
    spent = metered(
        "jev_tokens_total", lambda labels: labels["kind"] in ("input", "output") and labels["stage"] != "shadow"
    )
    return metered("jev_tokens_effective_total"), spent


def test_prometheus_te_is_the_clickhouse_te_of_the_same_events(usage_db):
    now = time.time()
    who = dict(
        request_id="w-1",
        ts=now,
        tenant="t0",
        service="payments",
        business_line="fintech",
        session_id="s-1",
        user_id="u-1",
        decision_type="risk_interception",
        business_event="payment_screened",
    )
    waste = [
        event(who, "score", "fine", model="gpt-4o-mini", input_tokens=400, outcome="fallback"),
        event(who, "postprocess", "cleanup", model="gpt-4o-mini", input_tokens=50, output_tokens=30),
        event(who, "postprocess", model="gpt-4o-mini", output_tokens=20, outcome="fallback"),
        event({**who, "request_id": "w-2"}, "shadow", "fine", model="gpt-4o", input_tokens=900),
    ]
    effective_before, spent_before = te_parts()
    UsageSink(usage_db).insert(usage_events(200, now, seed=3) + waste)
    effective, spent = (after - before for after, before in zip(te_parts(), (effective_before, spent_before)))
    te = levels.index_values(usage_db, dt.datetime.now(dt.UTC) - dt.timedelta(days=1))["te"]
    assert te is not None and te < 1
    assert round(effective / spent, 4) == te


def test_index_alerts_fire_through_the_alert_path(usage_db):
    events = usage_events(300, time.time())
    for e in events:
        if e.stage == "ingest":
            e.prompt_bytes, e.compact_bytes = 500, 100  # PE 5.0
    UsageSink(usage_db).insert(events)
    fired = {a.rule: a for a in efficiency_indices(usage_db, Thresholds(), dt.datetime.now(dt.UTC))}
    assert fired["protocol_expansion_high"].value == 5.0
    values = levels.index_values(usage_db, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=15))
    assert ("cache_penetration_high" in fired) == (values["cp"] > 0.25)
    quiet = efficiency_indices(
        usage_db, Thresholds(pe_max=10, cp_alert=1, hr_min=0, hr_max=1, te_alert=0), dt.datetime.now(dt.UTC)
    )
    assert quiet == []


def test_prometheus_thresholds_are_the_settings_defaults():
    rules = {
        r.get("alert") or r.get("record"): r["expr"]
        for g in yaml.safe_load((ROOT / "infra/prometheus/alerts.yml").read_text())["groups"]
        for r in g["rules"]
    }
    numbers = lambda expr: [float(x) for x in re.findall(r"[<>] (\d+(?:\.\d+)?)", expr)]  # noqa: E731
    s = Settings()
    assert numbers(rules["JevTokenEfficiencyLow"]) == [s.index_te_alert]
    assert numbers(rules["JevCachePenetrationHigh"]) == [s.index_cp_alert]
    assert numbers(rules["JevHybridRoutingOutOfRange"]) == [s.index_hr_min, s.index_hr_max]
    assert numbers(rules["JevProtocolExpansionHigh"]) == [s.index_pe_max]
    assert numbers(rules["JevGpuMemoryOutOfRange"]) == [s.index_mu_min, s.index_mu_max]
    assert Thresholds.from_settings(s) == Thresholds()
