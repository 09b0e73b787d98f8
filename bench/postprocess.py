"""Postprocess throughput and effect on real model answers (Arena-Hard, gpt-3.5-turbo and gpt-4).

    .venv/bin/python bench/postprocess.py [--limit N] [--repeat R]

Measures on one core: MB/s of clean() (cleanup + token counts + sensitive scan, what the stage runs),
beside the tokenizer alone and the scan alone (`ratio_to_tokenizer`: clean's MB/s over the tokenizer's, in
the same run), and per model: tokens removed, share of answers changed, and answers whose cleanup dropped a
number or a name (`dropped_content`, target 0), on the answers the cleanup patterns were fixed on (the first
--tuned of each model) and on the rest, held out.
Last stdout line: one JSON object (`mb_per_s` is the headline, target >= 5).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import orjson

from streams import settings as settings_mod
from streams import tokens
from streams.output.clean import clean, dropped_content
from streams.output.patterns import load
from workers.jsonl import iter_field

ANSWERS = {"gpt-3.5-turbo": "answers-gpt-3.5-turbo-0125.jsonl", "gpt-4": "answers-gpt-4-0314.jsonl"}
FIELD = "choices.0.turns.0.content"


def throughput(texts: list[str], fn, repeat: int) -> float:
    """Best MB/s of `repeat` passes of fn over every text."""
    size = sum(len(t.encode()) for t in texts) / 1e6
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            fn(text)
        best = min(best, time.perf_counter() - start)
    return round(size / best, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=500, help="answers per model (default: all 500)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; the best counts")
    parser.add_argument("--tuned", type=int, default=400,
                        help="answers per model the patterns were fixed on; the rest are the held-out slice")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    data = Path(settings_mod.load().shared_data) / "arena-hard"
    if not data.exists():
        print(f"no Arena-Hard answers under {data}: set JEV_SHARED_DATA to the shared data folder", file=sys.stderr)
        return 2
    patterns = load()
    result: dict = {"patterns_version": patterns.version}
    everything: list[str] = []
    for model, name in ANSWERS.items():
        texts = [t for _, t in zip(range(args.limit), iter_field(str(data / name), FIELD))]
        everything += texts
        print(f"{model}: cleaning {len(texts)} answers", file=sys.stderr)
        results = [clean(t, model=model, config=patterns) for t in texts]
        before = sum(c.tokens_before for c in results)
        removed = sum(c.tokens_removed for c in results)
        result[model] = {"answers": len(texts), "tokens_before": before, "tokens_removed": removed,
                         "removed_share": round(removed / before, 4) if before else 0.0,
                         "changed_share": round(sum(c.text != t for t, c in zip(texts, results)) / len(texts), 4),
                         "flagged": sum(bool(c.flagged) for c in results),
                         "dropped_content": {
                             "tuned": sum(bool(dropped_content(t, c.text)) for t, c in
                                          zip(texts[:args.tuned], results[:args.tuned])),
                             "held_out": sum(bool(dropped_content(t, c.text)) for t, c in
                                             zip(texts[args.tuned:], results[args.tuned:])),
                             "held_out_answers": max(0, len(texts) - args.tuned)}}
    tokens.count("warm up", "gpt-4")
    print(f"timing {len(everything)} answers, best of {args.repeat}", file=sys.stderr)
    result["mb"] = round(sum(len(t.encode()) for t in everything) / 1e6, 3)
    result["mb_per_s"] = throughput(everything, lambda t: clean(t, model="gpt-4", config=patterns), args.repeat)
    result["tokenizer_mb_per_s"] = throughput(everything, lambda t: tokens.count(t, "gpt-4"), args.repeat)
    result["scan_mb_per_s"] = throughput(everything, patterns.scanner.scan, args.repeat)
    result["ratio_to_tokenizer"] = round(result["mb_per_s"] / result["tokenizer_mb_per_s"], 3)
    result["target_mb_per_s"] = 5.0
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
