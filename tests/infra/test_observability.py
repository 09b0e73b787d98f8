"""Prometheus config and rules, and the Grafana dashboard, against the real schema and metric names."""

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from streams.core import metrics

INFRA = Path(__file__).resolve().parents[2] / "infra"
DASHBOARD = json.loads((INFRA / "grafana/dashboards/jev-usage.json").read_text())
RULES = [r for g in yaml.safe_load((INFRA / "prometheus/alerts.yml").read_text())["groups"] for r in g["rules"]]
DECLARED = {m._name for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}


def clickhouse_queries():
    return [(p["title"], t["rawSql"]) for p in DASHBOARD["panels"] for t in p.get("targets", []) if "rawSql" in t]


def prometheus_exprs():
    return [(p["title"], t["expr"]) for p in DASHBOARD["panels"] for t in p.get("targets", []) if "expr" in t] + [
        (r.get("alert") or r["record"], r["expr"]) for r in RULES
    ]


def test_prometheus_config_loads_the_rules_file():
    config = yaml.safe_load((INFRA / "prometheus/prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    assert {job["job_name"] for job in config["scrape_configs"]} == {"jev-stream", "jev-score"}


@pytest.mark.parametrize("title, expr", prometheus_exprs())
def test_prometheus_expressions_use_declared_metrics(title, expr):
    used = set(re.findall(r"\b(jev_[a-z_]+)", expr))
    recorded = set(re.findall(r"\b(jev:[a-z_0-9:]+)", expr))
    assert used or recorded, title
    assert recorded <= {r["record"] for r in RULES if "record" in r}, f"{title}: {recorded} are not recording rules"
    for name in used:
        base = re.sub(r"_(total|bucket|sum|count)$", "", name)
        assert base in DECLARED, f"{title}: {name} is not declared in streams/core/metrics.py"


@pytest.mark.parametrize("title, sql", clickhouse_queries())
def test_dashboard_sql_runs_on_the_migrated_schema(usage_db, title, sql):
    concrete = re.sub(r"\$__timeFilter\((\w+)\)", r"\1 >= now() - INTERVAL 1 DAY", sql)
    usage_db.query(concrete)


def test_dashboard_covers_the_four_levels():
    rows = [p["title"] for p in DASHBOARD["panels"] if p["type"] == "row"]
    assert [r.split()[0] for r in rows[:4]] == ["Request", "Session", "Service", "Business"]
