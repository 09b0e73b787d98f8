"""Distill benchmark: ShareGPT multi-turn conversations (and Arena-Hard prompts) through the distill stage.

Runs the default policy, each layer switched off, and a few budgets side by side, each conversation cut after its
last user turn. Last stdout line: median_reduction, last_user_kept, conversations_per_s (CPU seconds of this one
thread, best of 3 passes), per-layer tokens before/after and the reduction distribution.

    .venv/bin/python bench/distill.py [--limit 3000] [--model gpt-4o-mini]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams import settings as settings_mod  # noqa: E402
from streams.distill.conversations import arena_hard, sharegpt  # noqa: E402
from streams.distill.core import LAYERS  # noqa: E402
from streams.distill.policy import load_policy  # noqa: E402
from streams.distill.report import Summary, distill_all  # noqa: E402


def measure(conversations, *, model, budget, policy, switches, now) -> tuple[dict, float, float]:
    summary = Summary()
    cpu, wall = time.process_time(), time.perf_counter()
    for messages, result in distill_all(
        conversations, model=model, budget=budget, policy=policy, switches=switches, now=now
    ):
        summary.add(messages, result)
    return summary.as_json(), time.process_time() - cpu, time.perf_counter() - wall


def per_layer(total: dict) -> dict:
    """Tokens entering and leaving each layer, in the order the layers run."""
    out, level = {}, total["tokens_before"]
    for layer in (*LAYERS, "provenance"):
        saved = total["saved_by_layer"].get(layer, 0)
        out[layer] = {"tokens_before": level, "tokens_after": level - saved}
        level -= saved
    return out


def arena_sessions(shared: str) -> list[list[dict]]:
    """Real Arena-Hard text as 3-turn sessions: two prompts of one cluster with GPT-4's answer between."""
    path = Path(shared) / "arena-hard"
    answers = {}
    with open(path / "answers-gpt-4-0314.jsonl", "rb") as f:
        for raw in f:
            row = orjson.loads(raw)
            answers[row["question_id"]] = row["choices"][0]["turns"][0]["content"]
    by_cluster: dict[str, list[dict]] = {}
    with open(path / "questions.jsonl", "rb") as f:
        for raw in f:
            row = orjson.loads(raw)
            by_cluster.setdefault(row["cluster"], []).append(row)
    sessions = []
    for rows in by_cluster.values():
        if len(rows) >= 2 and rows[0]["question_id"] in answers:
            sessions.append(
                [
                    {"role": "user", "content": rows[0]["turns"][0]["content"]},
                    {"role": "assistant", "content": answers[rows[0]["question_id"]]},
                    {"role": "user", "content": rows[1]["turns"][0]["content"]},
                ]
            )
    return sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=3000, help="ShareGPT multi-turn conversations to use")
    parser.add_argument("--model", default="gpt-4o-mini")
    parser.add_argument("--decision-type", default="default")
    args = parser.parse_args()
    settings = settings_mod.load()
    policy = load_policy(args.decision_type)
    now = time.time()
    print(f"loading {args.limit} ShareGPT conversations …", file=sys.stderr)
    conversations = list(itertools.islice(sharegpt(), args.limit))
    common = {"model": args.model, "policy": policy, "now": now}
    measure(conversations[:10], budget=None, switches={}, **common)  # load the tokenizer outside the timing
    runs = [measure(conversations, budget=None, switches={}, **common) for _ in range(3)]
    total = runs[0][0]
    cpu, wall = min(r[1] for r in runs), min(r[2] for r in runs)  # best of 3: the machine is shared
    print(
        f"default: median reduction {total['median_reduction']:.1%}, {len(conversations) / cpu:,.0f} conv/s per core",
        file=sys.stderr,
    )
    ablation = {}
    for layer in LAYERS:
        off, _, _ = measure(conversations, budget=None, switches={f"distill.{layer}": False}, **common)
        ablation[f"{layer}_off"] = {"median_reduction": off["median_reduction"], "tokens_after": off["tokens_after"]}
        print(f"{layer} off: median reduction {off['median_reduction']:.1%}", file=sys.stderr)
    budgets = {}
    for budget in (512, 1024, 0):
        row, _, _ = measure(conversations, budget=budget, switches={}, **common)
        budgets[str(budget or "none")] = {
            k: row[k] for k in ("median_reduction", "reduction_p10", "reduction_p90", "last_user_kept", "grew")
        }
        print(f"budget {budget or 'none'}: median reduction {row['median_reduction']:.1%}", file=sys.stderr)
    arena = {}
    try:
        prompts = list(arena_hard(settings.shared_data))
        sessions = arena_sessions(settings.shared_data)
        for name, data in (("prompts", prompts), ("cluster_sessions", sessions)):
            row, _, _ = measure(data, budget=None, switches={}, **common)
            arena[name] = {
                k: row[k]
                for k in (
                    "conversations",
                    "median_reduction",
                    "reduction_p10",
                    "reduction_p90",
                    "last_user_kept",
                    "grew",
                    "tokens_before",
                    "tokens_after",
                )
            }
            print(f"arena-hard {name}: median reduction {row['median_reduction']:.1%}", file=sys.stderr)
    except FileNotFoundError as exc:
        arena = {"skipped": str(exc)}
    print(
        orjson.dumps(
            {
                "dataset": "sharegpt (>=2 user turns, cut after the last user turn)",
                "model": args.model,
                "decision_type": args.decision_type,
                "budget": policy.budget,
                "conversations": total["conversations"],
                "median_reduction": total["median_reduction"],
                "last_user_kept": total["last_user_kept"],
                "grew": total["grew"],
                "conversations_per_s": round(len(conversations) / cpu),
                "wall_conversations_per_s": round(len(conversations) / wall),
                "reduction": {
                    "p10": total["reduction_p10"],
                    "p50": total["reduction_p50"],
                    "p90": total["reduction_p90"],
                },
                "tokens_before": total["tokens_before"],
                "tokens_after": total["tokens_after"],
                "layers": per_layer(total),
                "layer_off": ablation,
                "budgets": budgets,
                "arena_hard": arena,
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
