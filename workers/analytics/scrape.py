"""The metrics contract: which Prometheus series the alert rules and the Grafana dashboard read, and whether a
run's /metrics scrapes carry each of them with a non-zero sample. `jev demo --metrics-out` and
tests/infra/test_metrics_contract.py use it; a rule or panel on a series the product never records fails there."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

INFRA = Path(__file__).resolve().parents[2] / "infra"
SERIES = re.compile(r"\b(jev_[a-z_]+)")
GPU_ONLY = {"jev_gpu_memory_utilization"}  # recorded by scoring workers on a GPU backend only
# moved only when the broker comes back without its logs (tests/integration/test_broker_restart.py checks it)
BROKER_LOSS_ONLY = {"jev_log_restarts_total"}
# moved only by a model server that reports its prefix cache's reads (tests/streams/core/test_metrics.py checks it)
SERVER_CACHE_ONLY = {"jev_model_cache_read_tokens_total"}


def gpu_present() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def referenced_series(
    infra: Path = INFRA, gpu: bool = True, broker_loss: bool = True, server_cache: bool = True
) -> dict[str, list[str]]:
    """{series name as scraped (jev_breaker_trips_total, jev_stage_latency_seconds_bucket): [the alert rules and
    dashboard panels that read it]}; without `gpu`, less the series only a GPU scoring worker records; without
    `broker_loss`, less those only a broker that lost its logs moves; without `server_cache`, less those only a
    model server's prefix-cache reads move."""
    left_out = (set() if gpu else GPU_ONLY) | (set() if broker_loss else BROKER_LOSS_ONLY)
    left_out |= set() if server_cache else SERVER_CACHE_ONLY
    uses: list[tuple[str, str]] = []
    for group in yaml.safe_load((infra / "prometheus/alerts.yml").read_text())["groups"]:
        uses += [(f"alert {r.get('alert') or r.get('record')}", r["expr"]) for r in group["rules"]]
    for dashboard in sorted((infra / "grafana/dashboards").glob("*.json")):
        panels = json.loads(dashboard.read_text())["panels"]
        uses += [(f"panel {p['title']}", t["expr"]) for p in panels for t in p.get("targets", []) if "expr" in t]
    found: dict[str, list[str]] = {}
    for where, expr in uses:
        for series in SERIES.findall(expr):
            if series not in left_out:
                found.setdefault(series, []).append(where)
    return found


def samples(text: str) -> dict[str, float]:
    """{series name: largest absolute sample value} of one /metrics scrape (every label set, every process)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = max(out.get(s.name, 0.0), abs(s.value))
    return out


def totals(scrapes: list[str]) -> dict[str, float]:
    """{series name: its samples summed over every label set and scrape}; a histogram's _bucket series counts
    its observations (the +Inf buckets), not the cumulative sum of every bucket."""
    out: dict[str, float] = {}
    for text in scrapes:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if not s.name.endswith("_bucket") or s.labels.get("le") == "+Inf":
                    out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def missing_or_still(scrapes: list[str], wanted) -> dict[str, str]:
    """{series: "missing" | "zero"} for each wanted series no scrape carries, or carries only at zero."""
    seen: dict[str, float] = {}
    for text in scrapes:
        for name, value in samples(text).items():
            seen[name] = max(seen.get(name, 0.0), value)
    return {name: "missing" if name not in seen else "zero" for name in wanted if not seen.get(name)}


def fetch(port: int, host: str = "127.0.0.1", timeout: float = 5.0, token: str = "") -> str:
    """One scrape of /metrics; `token` is sent as the bearer token a JEV_METRICS_TOKEN endpoint requires."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://{host}:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode()


def labelled_samples(text: str) -> dict[str, float]:
    """{'name{label="value",...}': value} of one scrape, labels in name order: for looking up one series."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def _escape(value: str, quote: bool = True) -> str:
    """A label value (`quote`) or a HELP text as the text format escapes it: HELP escapes no double quote."""
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quote else value


def _number(v: float) -> str:
    return "+Inf" if v == float("inf") else "-Inf" if v == float("-inf") else "NaN" if v != v else repr(float(v))


def merge_scrapes(scraped: dict[str, str]) -> str:
    """The scrapes of several processes as one exposition in the Prometheus text format: each family's HELP and
    TYPE once, each sample labelled with the `process` it came from (as Prometheus's `instance` label would)."""
    families: dict[str, tuple[str, str, list[str]]] = {}
    for process, text in scraped.items():
        for family in text_string_to_metric_families(text):
            _, _, lines = families.setdefault(family.name, (family.documentation, family.type, []))
            for s in family.samples:
                if s.name.endswith("_created"):  # creation timestamps: not usage, and no sample of the family's type
                    continue
                labels = {"process": process, **s.labels}
                body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                lines.append(f"{s.name}{{{body}}} {_number(s.value)}")
    out = []
    for name, (doc, kind, lines) in families.items():
        name = f"{name}_total" if kind == "counter" else name  # as the text format names a counter
        out += [f"# HELP {name} {_escape(doc, quote=False)}", f"# TYPE {name} {kind}", *lines]
    return "\n".join(out) + "\n"
