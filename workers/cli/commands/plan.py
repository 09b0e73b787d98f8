"""`jev plan FILE.yaml`: tokens per decision, per day and cost for a traffic mix, naive vs optimized."""

from __future__ import annotations

import sys

import orjson
import yaml

from workers.planner import fleet
from workers.planner.plan import MECHANISMS, PlanError, plan


def register(sub) -> None:
    p = sub.add_parser("plan", help="plan tokens and cost per day for a traffic mix (see docs/planner.md)")
    p.add_argument(
        "file",
        help="YAML: qps, decision_types {share, context_tokens, candidates, candidate_tokens, "
        "iterations}, optimizations {shared_context, cascade_top_k, cache_hit_rate, rules_share}",
    )
    p.add_argument("--json", action="store_true", help="one JSON line per decision type, then the summary")
    p.add_argument(
        "--costs",
        default="",
        metavar="FILE",
        help="measured per-decision costs for the fleet sizing (default workers/planner/fleet_costs.json)",
    )
    p.set_defaults(func=run)


def run(args, settings) -> int:
    try:
        with open(args.file) as f:
            result = plan(yaml.safe_load(f) or {}, fleet.load(args.costs) if args.costs else None)
    except (OSError, yaml.YAMLError, PlanError, fleet.CostsError) as exc:
        print(f"jev plan: {args.file}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        for name, row in result["decision_types"].items():
            print(orjson.dumps({"decision_type": name} | row).decode())
        print(orjson.dumps(result).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    types = Table(
        "decision type",
        "share",
        "naive tokens/decision",
        "optimized tokens/decision",
        title=f"{result['decisions_per_day']:,} decisions/day at {result['qps']:g} QPS",
    )
    for name, row in result["decision_types"].items():
        types.add_row(
            name,
            f"{row['share']:.0%}",
            f"{row['naive_tokens_per_decision']:,.0f}",
            f"{row['optimized_tokens_per_decision']:,.1f}",
        )
    types.add_row(
        "mix",
        "100%",
        f"{result['naive_tokens_per_decision']:,.0f}",
        f"{result['optimized_tokens_per_decision']:,.1f}",
        style="bold",
    )
    console.print(types)
    savings = Table("mechanism", "tokens saved/day", "share of naive", title="savings (attributed in this order)")
    for m in MECHANISMS:
        saved = result["savings_tokens_per_day"][m]
        savings.add_row(m, f"{saved:,}", f"{saved / max(result['naive_tokens_per_day'], 1):.1%}")
    console.print(savings)
    console.print(
        f"tokens/day: naive {result['naive_tokens_per_day']:,} → optimized "
        f"{result['optimized_tokens_per_day']:,} ({result['savings_ratio']:.1%} saved); cost/day at "
        f"{result['model']} prices: ${result['naive_cost_per_day']:,.2f} → ${result['optimized_cost_per_day']:,.2f}"
    )
    f = result["fleet"]
    console.print(
        f"fleet: {f['stage_processes']} stage processes, {f['scoring_workers']} CPU scoring workers or "
        f"{f['gpus']} GPUs, {f['partitions']} partitions, {f['clickhouse_rows_per_s']:,} ClickHouse rows/s "
        f"(measured costs: workers/planner/fleet_costs.json)"
    )
    core = f["one_more_core_decisions_per_s"]
    console.print(
        f"one more core buys {core['mix']:,} decisions/s of this mix ({core['model']:,} on the model path, "
        f"{core['rules_cache']:,} on the rules/cache path) at {f['utilization']:.0%} utilization"
    )
    return 0
