"""Fleet sizing for `jev plan`: stage processes, scoring workers (CPU) or GPUs, partitions and the ClickHouse insert
rate a traffic mix needs, from per-decision costs the benchmarks measured.

The costs live in workers/planner/fleet_costs.json, each with the command that measured it (`bench/scale.py
--record` updates it; `jev plan --costs FILE` takes another). The arithmetic and a worked example are in
docs/planner.md.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import orjson

COSTS = Path(__file__).with_name("fleet_costs.json")
NEEDED = (
    "stage_cpu_ms_per_cached_decision",
    "stage_cpu_ms_per_model_decision",
    "scorer_cpu_ms_per_candidate",
    "gpu_candidates_per_s",
    "usage_rows_per_decision",
    "clickhouse_rows_per_s",
)


class CostsError(ValueError):
    pass


def load(path: Path | str = COSTS) -> dict:
    try:
        figures = orjson.loads(Path(path).read_bytes())["figures"]
    except (OSError, ValueError, KeyError) as exc:
        raise CostsError(
            f"{path}: cannot read the measured costs ({exc}); run bench/scale.py --record, or pass --costs FILE"
        ) from exc
    missing = [k for k in NEEDED if k not in figures]
    if missing:
        raise CostsError(
            f"{path}: missing figures {missing}; each is written by the benchmark named in workers/planner/fleet.py"
        )
    return figures


def record(name: str, value, unit: str, source: str, detail: str, path: Path = COSTS) -> None:
    """Write one measured figure (a benchmark calls this), keeping the others."""
    doc = orjson.loads(path.read_bytes()) if path.exists() else {"figures": {}}
    doc["figures"][name] = {
        "value": value,
        "unit": unit,
        "source": source,
        "detail": detail,
        "measured_at": datetime.date.today().isoformat(),
    }
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")


def gpu_rate(points: list[list[float]], context: float) -> float:
    """Candidates/s at `context` tokens from measured [context, candidates/s] points."""
    points = sorted(points)
    if context <= points[0][0]:
        return points[0][1]
    for (c0, r0), (c1, r1) in zip(points, points[1:]):
        if context <= c1:
            return r0 + (r1 - r0) * (context - c0) / (c1 - c0)
    c, r = points[-1]
    return r * c / context


def size(
    qps: float, types: list, opt: dict, figures: dict, utilization: float = 0.7, rows_per_insert: int = 10_000
) -> dict:
    v = {k: figures[k]["value"] for k in NEEDED}
    m = (1 - opt["rules_share"]) * (1 - opt["cache_hit_rate"])
    k = opt["cascade_top_k"]
    fine = sum(t.share * t.iterations * (min(t.candidates, k) if k else t.candidates) for t in types)
    context = sum(t.share * t.context_tokens for t in types)
    stage_ms = qps * ((1 - m) * v["stage_cpu_ms_per_cached_decision"] + m * v["stage_cpu_ms_per_model_decision"])
    scored_per_s = qps * m * fine
    stages = math.ceil(stage_ms / (1000 * utilization))
    workers = math.ceil(scored_per_s * v["scorer_cpu_ms_per_candidate"] / (1000 * utilization))
    gpu_per_s = gpu_rate(v["gpu_candidates_per_s"], context)
    gpus = math.ceil(scored_per_s / (gpu_per_s * utilization))
    rows = qps * v["usage_rows_per_decision"]
    model_ms = v["stage_cpu_ms_per_model_decision"] + fine * v["scorer_cpu_ms_per_candidate"]
    cached_ms = v["stage_cpu_ms_per_cached_decision"]
    core = 1000 * utilization
    return {
        "stage_processes": stages,
        "scoring_workers": workers,
        "gpus": gpus,
        "partitions": 2 ** math.ceil(math.log2(2 * max(stages, gpus, 1))),
        "partitions_with_cpu_scoring": 2 ** math.ceil(math.log2(2 * max(stages, workers, 1))),
        "clickhouse_rows_per_s": round(rows),
        "clickhouse_inserts_per_s": round(rows / rows_per_insert, 2),
        "clickhouse_load": round(rows / v["clickhouse_rows_per_s"], 3),
        "model_decisions_per_s": round(qps * m, 1),
        "fine_candidates_per_s": round(scored_per_s),
        "gpu_candidates_per_s_at_context": round(gpu_per_s),
        "mix_context_tokens": round(context),
        "utilization": utilization,
        "one_more_core_decisions_per_s": {
            "rules_cache": round(core / cached_ms, 1),
            "model": round(core / model_ms, 1),
            "mix": round(core / ((1 - m) * cached_ms + m * model_ms), 1),
        },
        "figures": {name: figures[name] for name in NEEDED},
    }
