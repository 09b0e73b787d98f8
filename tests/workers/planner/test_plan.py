import math

import pytest

from workers.planner.plan import PlanError, plan

ISSUE_EXAMPLE = {
    "qps": 1800,
    "decision_types": {
        "simple": {"share": 0.60, "context_tokens": 1800, "candidates": 5, "candidate_tokens": 200, "iterations": 1},
        "complex": {"share": 0.40, "context_tokens": 3000, "candidates": 35, "candidate_tokens": 200, "iterations": 3},
    },
    "optimizations": {"shared_context": True, "cascade_top_k": 5, "cache_hit_rate": 0.3, "rules_share": 0.2},
}


def test_issue_example_matches_the_worked_arithmetic():
    out = plan(ISSUE_EXAMPLE)
    # simple: 1 × (1800 + 5 × 2000) = 11,800; complex: 3 × (3000 + 35 × 3200) = 345,000
    assert out["decision_types"]["simple"]["naive_tokens_per_decision"] == 11_800
    assert out["decision_types"]["complex"]["naive_tokens_per_decision"] == 345_000
    assert out["naive_tokens_per_decision"] == pytest.approx(0.6 * 11_800 + 0.4 * 345_000)
    assert out["naive_tokens_per_day"] == round(145_080 * 1800 * 86_400)
    # optimized: 0.8 × 0.7 × (0.6 × 1 × (1800 + 5 × 200) + 0.4 × 3 × (3000 + 5 × 200))
    assert out["optimized_tokens_per_decision"] == pytest.approx(0.56 * (0.6 * 2800 + 0.4 * 12_000))
    assert out["optimized_tokens_per_day"] == round(3628.8 * 1800 * 86_400)


@pytest.mark.parametrize(
    "optimizations",
    [
        {},
        {"shared_context": True},
        {"cascade_top_k": 3},
        {"cache_hit_rate": 0.5, "rules_share": 0.1},
        ISSUE_EXAMPLE["optimizations"],
    ],
)
def test_savings_add_up_to_naive_minus_optimized(optimizations):
    out = plan(ISSUE_EXAMPLE | {"optimizations": optimizations})
    saved = sum(out["savings_tokens_per_day"].values())
    assert saved == pytest.approx(out["naive_tokens_per_day"] - out["optimized_tokens_per_day"], abs=4)
    if not optimizations:
        assert out["optimized_tokens_per_day"] == out["naive_tokens_per_day"] and saved == 0


def test_cost_uses_the_price_table_or_given_prices():
    out = plan(ISSUE_EXAMPLE | {"prices": {"model": "gpt-4o-mini"}})
    assert out["naive_cost_per_day"] == pytest.approx(out["naive_tokens_per_day"] * 0.15 / 1e6, abs=0.01)
    out = plan(ISSUE_EXAMPLE | {"prices": {"input": 1.0, "output": 0.0}})
    assert out["optimized_cost_per_day"] == pytest.approx(out["optimized_tokens_per_day"] / 1e6, abs=0.01)


@pytest.mark.parametrize(
    "change,match",
    [
        ({"qps": 0}, "qps"),
        ({"qps": -5}, "qps"),
        (
            {"decision_types": {"a": {"share": 0.5, "context_tokens": 1, "candidates": 1, "candidate_tokens": 1}}},
            "sum to 1",
        ),
        (
            {"decision_types": {"a": {"share": 1, "context_tokens": -1, "candidates": 1, "candidate_tokens": 1}}},
            "context_tokens",
        ),
        (
            {
                "decision_types": {
                    "a": {"share": 1, "context_tokens": 1, "candidates": 1, "candidate_tokens": 1, "iterations": 0}
                }
            },
            "iterations",
        ),
        (
            {
                "decision_types": {
                    "a": {"share": 1, "context_tokens": 1, "candidates": 1, "candidate_tokens": 1, "contxt": 9}
                }
            },
            "unknown keys",
        ),
        ({"optimizations": {"cache_hit_rate": 1.5}}, "cache_hit_rate"),
        ({"qpss": 1}, "unknown keys"),
    ],
)
def test_bad_plans_are_clear_errors(change, match):
    with pytest.raises(PlanError, match=match):
        plan(ISSUE_EXAMPLE | change)


def test_fleet_sizing_follows_the_measured_costs():

    figures = {
        name: {"value": value}
        for name, value in {
            "stage_cpu_ms_per_cached_decision": 0.5,
            "stage_cpu_ms_per_model_decision": 2.0,
            "scorer_cpu_ms_per_candidate": 10.0,
            "gpu_candidates_per_s": [[512, 4000], [2048, 2000]],
            "usage_rows_per_decision": 4.0,
            "clickhouse_rows_per_s": 60_000,
        }.items()
    }
    out = plan(ISSUE_EXAMPLE, figures)["fleet"]
    # m = 0.56; stage CPU = 1800 × (0.44 × 0.5 + 0.56 × 2.0) = 2,412 ms/s → ⌈2.412 / 0.7⌉ = 4
    assert out["stage_processes"] == 4
    # fine candidates per model decision: 0.6 × 1 × 5 + 0.4 × 3 × 5 = 9; 1800 × 0.56 × 9 = 9,072/s
    assert out["fine_candidates_per_s"] == 9072
    assert out["scoring_workers"] == math.ceil(9072 * 10.0 / 700)
    # mix context 0.6 × 1800 + 0.4 × 3000 = 2,280 tokens: beyond the last point, 2000 × 2048 / 2280 candidates/s
    assert out["gpus"] == math.ceil(9072 / (2000 * 2048 / 2280 * 0.7))
    # one core at 0.7: 700 ms of CPU per second; a model decision costs 2.0 + 9 × 10.0 = 92 ms over its processes
    assert out["one_more_core_decisions_per_s"] == {
        "rules_cache": 1400.0,
        "model": round(700 / 92, 1),
        "mix": round(700 / (0.44 * 0.5 + 0.56 * 92), 1),
    }
    assert out["partitions"] == 16 and out["clickhouse_rows_per_s"] == 7200


def test_costs_file_missing_a_figure_names_it(tmp_path):
    from workers.planner import fleet

    path = tmp_path / "costs.json"
    path.write_text('{"figures": {"usage_rows_per_decision": {"value": 4}}}')
    with pytest.raises(fleet.CostsError, match="stage_cpu_ms_per_cached_decision"):
        fleet.load(path)
