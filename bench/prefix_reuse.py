"""Prefix reuse on a model server: the demo's support questions answered one after another with the shared support
policy first (as ingest and distill hand it to the generator) vs the question first, alternating block by block,
English and Chinese mixed. A server that keeps earlier prompts' KV cache reads only the question of a policy-first
prompt, and reports the tokens its cache served (`usage.prompt_tokens_details.cached_tokens`).
Starts the local llama.cpp server (infra/model_server.py) and stops it after.
Last stdout line: {shared_first: {...}, question_first: {...}, ratio_p50, ratio_p95}.

    .venv/bin/python bench/prefix_reuse.py [--questions 12] [--rounds 2] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import orjson

from schemas.records import Request
from streams.models import openai as engine_mod
from streams.models import pool as pool_mod
from streams.text.prompt import history_lines, render_context, state_line
from workers.harness import workload


def layouts(n: int, skip: int = 0) -> dict[str, list[str]]:
    """n distinct support questions (after the first `skip`), each as the generator gets it (shared first) and
    reordered (question first)."""
    distinct = {
        b["state"]: b
        for b in map(
            orjson.loads,
            workload.generate((n + skip) * 4, seed=13, repeat_share=0.0, stream_share=1.0, chinese_share=0.2),
        )
    }
    bodies = list(distinct.values())[skip : skip + n]
    requests = [Request.from_data(b) for b in bodies]
    return {
        "shared_first": [render_context(r) for r in requests],
        "question_first": ["\n\n".join([state_line(r), *history_lines(r)]) for r in requests],
    }


def answer(engine, prompt: str, max_tokens: int) -> tuple[float, object]:
    """Milliseconds to the first piece of a streamed answer, and the server's usage of it."""
    started = time.perf_counter()
    streaming = engine.stream(prompt, max_tokens)
    first = None
    for _ in streaming:
        first = first or time.perf_counter()
    return ((first or time.perf_counter()) - started) * 1000, streaming.server


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2, help="blocks of each layout, alternating")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()
    from infra.model_server import ModelServer, idle_cores, missing

    why = missing()
    if why:
        print(json.dumps({"skipped": why}))
        return 0
    server = ModelServer(threads=idle_cores()).start()
    try:
        entry = pool_mod.load()["smollm2-server"]
        engine = engine_mod.OpenAIEngine(dataclasses.replace(entry, base_url=server.url, model=server.model))
        prompts = layouts(args.questions)
        answer(engine, "Hello", 1)  # the server's first call (its start-up work) counts for neither layout
        out = {
            name: {
                "answers": 0,
                "first_piece_ms": [],
                "prompt_tokens_jev": 0,
                "prompt_tokens_server": 0,
                "cached_tokens": 0,
            }
            for name in prompts
        }
        for round_ in range(args.rounds):
            order = list(prompts) if round_ % 2 == 0 else list(reversed(prompts))
            for name in order:
                row = out[name]
                for prompt in prompts[name]:
                    ms, usage = answer(engine, prompt, args.max_tokens)
                    row["first_piece_ms"].append(ms)
                    row["prompt_tokens_jev"] += engine.count_chat(prompt)
                    row["prompt_tokens_server"] += usage.prompt_tokens if usage else 0
                    row["cached_tokens"] += usage.cached_tokens if usage else 0
                    row["answers"] += 1
        for row in out.values():
            times = row.pop("first_piece_ms")
            row["first_piece_ms_p50"], row["first_piece_ms_p95"] = percentile(times, 0.5), percentile(times, 0.95)
            row["cached_share"] = round(row["cached_tokens"] / max(row["prompt_tokens_server"], 1), 3)
        shared, other = out["shared_first"], out["question_first"]
        print(
            json.dumps(
                {
                    "server": "llama-server",
                    "threads": server.threads,
                    "questions": args.questions,
                    "rounds": args.rounds,
                    "max_tokens": args.max_tokens,
                    **out,
                    "ratio_p50": round(other["first_piece_ms_p50"] / shared["first_piece_ms_p50"], 2),
                    "ratio_p95": round(other["first_piece_ms_p95"] / shared["first_piece_ms_p95"], 2),
                }
            )
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
