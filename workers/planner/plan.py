"""The token planner: tokens and cost per decision and per day for a traffic mix, naive vs optimized.

Per decision type the naive path re-reads the context with every candidate; the optimized one shares it, sends only
the cascade's top K to the big model, and skips what rules and caches answer. Savings are attributed in that order
(rules, cache, shared context, cascade) and sum to naive − optimized; docs/planner.md has the formulas. The
summary's `fleet` sizes the processes for the mix (workers/planner/fleet.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from streams.models import pricing
from workers.planner import fleet as fleet_mod

SECONDS_PER_DAY = 86_400
MECHANISMS = ("rules", "cache", "shared_context", "cascade")
TYPE_FIELDS = {"share", "context_tokens", "candidates", "candidate_tokens", "iterations", "output_tokens"}
OPT_FIELDS = {"shared_context", "cascade_top_k", "cache_hit_rate", "rules_share"}
TOP_FIELDS = {"qps", "decision_types", "optimizations", "prices", "fleet"}


class PlanError(ValueError):
    pass


@dataclass(frozen=True)
class DecisionType:
    name: str
    share: float
    context_tokens: int
    candidates: int
    candidate_tokens: int
    iterations: int
    output_tokens: int = 0  # per iteration, for cost


def number(
    doc: dict, key: str, where: str, *, low: float = 0, high: float = math.inf, integer: bool = False, default=None
):
    value = doc.get(key, default)
    if (
        value is None
        or isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (integer and value != int(value))
        or not low <= value <= high
    ):
        kind = "an integer" if integer else "a number"
        raise PlanError(f"{where}.{key}: {value!r} must be {kind} in [{low:g}, {high:g}]")
    return int(value) if integer else float(value)


def unknown(doc: dict, allowed: set[str], where: str) -> None:
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: expected a mapping, got {doc!r}")
    if extra := set(doc) - allowed:
        raise PlanError(f"{where}: unknown keys {sorted(extra)}; allowed: {sorted(allowed)}")


def parse(doc: dict) -> tuple[float, list[DecisionType], dict, dict]:
    unknown(doc, TOP_FIELDS, "plan")
    qps = number(doc, "qps", "plan", low=1e-9)
    types = []
    for name, t in (doc.get("decision_types") or {}).items():
        unknown(t, TYPE_FIELDS, f"decision_types.{name}")
        where = f"decision_types.{name}"
        types.append(
            DecisionType(
                name,
                number(t, "share", where, high=1),
                number(t, "context_tokens", where, integer=True),
                number(t, "candidates", where, integer=True),
                number(t, "candidate_tokens", where, integer=True),
                number(t, "iterations", where, low=1, integer=True, default=1),
                number(t, "output_tokens", where, integer=True, default=0),
            )
        )
    if not types or abs(sum(t.share for t in types) - 1) > 1e-6:
        raise PlanError(f"decision_types: shares must sum to 1 (they sum to {sum(t.share for t in types):g})")
    opt = doc.get("optimizations") or {}
    unknown(opt, OPT_FIELDS, "optimizations")
    optimizations = {
        "shared_context": bool(opt.get("shared_context", False)),
        "cascade_top_k": number(opt, "cascade_top_k", "optimizations", integer=True, default=0),
        "cache_hit_rate": number(opt, "cache_hit_rate", "optimizations", high=1, default=0),
        "rules_share": number(opt, "rules_share", "optimizations", high=1, default=0),
    }
    return qps, types, optimizations, prices(doc.get("prices") or {})


def prices(doc: dict) -> dict:
    """`prices: {model: gpt-4o}` takes the price table; or give input/output USD per 1M tokens directly."""
    unknown(doc, {"model", "input", "output"}, "prices")
    model = str(doc.get("model", "gpt-4o"))
    table = pricing.price(model) or pricing.Price(0.0, 0.0, 0.0)
    return {
        "model": model,
        "input": number(doc, "input", "prices", default=table.input),
        "output": number(doc, "output", "prices", default=table.output),
    }


def per_decision(t: DecisionType, opt: dict) -> dict[str, float]:
    """Tokens one decision of type `t` costs naively, and what each mechanism saves of it."""
    c, n, d, i = t.context_tokens, t.candidates, t.candidate_tokens, t.iterations
    naive = i * (c + n * (c + d))
    per_candidate = d if opt["shared_context"] else c + d
    shared = i * (c + n * per_candidate)
    reaching = min(n, opt["cascade_top_k"]) if opt["cascade_top_k"] else n
    cascade = i * (c + reaching * per_candidate)
    r, h = opt["rules_share"], opt["cache_hit_rate"]
    rest = (1 - r) * (1 - h)
    return {
        "naive": naive,
        "optimized": rest * cascade,
        "rules": r * naive,
        "cache": (1 - r) * h * naive,
        "shared_context": rest * (naive - shared),
        "cascade": rest * (shared - cascade),
        "output_naive": i * t.output_tokens,
        "output_optimized": rest * i * t.output_tokens,
    }


def plan(doc: dict, costs: dict | None = None) -> dict:
    """`costs`: measured figures (workers/planner/fleet_costs.json when None)."""
    qps, types, opt, price = parse(doc)
    fleet_doc = doc.get("fleet") or {}
    unknown(fleet_doc, {"utilization"}, "fleet")
    utilization = number(fleet_doc, "utilization", "fleet", low=0.05, high=1, default=0.7)
    per_day = qps * SECONDS_PER_DAY
    rows = {t.name: per_decision(t, opt) for t in types}
    mix = {k: sum(t.share * rows[t.name][k] for t in types) for k in next(iter(rows.values()))}

    def usd(input_tokens: float, output_tokens: float) -> float:
        return round((input_tokens * price["input"] + output_tokens * price["output"]) / 1e6 * per_day, 2)

    return {
        "qps": qps,
        "decisions_per_day": round(per_day),
        "naive_tokens_per_decision": round(mix["naive"], 2),
        "naive_tokens_per_day": round(mix["naive"] * per_day),
        "optimized_tokens_per_decision": round(mix["optimized"], 2),
        "optimized_tokens_per_day": round(mix["optimized"] * per_day),
        "savings_ratio": round(1 - mix["optimized"] / mix["naive"], 4) if mix["naive"] else 0.0,
        "savings_tokens_per_day": {m: round(mix[m] * per_day) for m in MECHANISMS},
        "model": price["model"],
        "naive_cost_per_day": usd(mix["naive"], mix["output_naive"]),
        "optimized_cost_per_day": usd(mix["optimized"], mix["output_optimized"]),
        "decision_types": {
            t.name: {
                "share": t.share,
                "naive_tokens_per_decision": rows[t.name]["naive"],
                "optimized_tokens_per_decision": round(rows[t.name]["optimized"], 2),
                "naive_tokens_per_day": round(rows[t.name]["naive"] * t.share * per_day),
                "optimized_tokens_per_day": round(rows[t.name]["optimized"] * t.share * per_day),
            }
            for t in types
        },
        "fleet": fleet_mod.size(qps, types, opt, costs if costs is not None else fleet_mod.load(), utilization),
    }
