"""Postprocess throughput and effect on real model answers: English (Arena-Hard) and Chinese (zh-dev, GPT-4o).

MB/s of clean() (cleanup, token counts, sensitive scan) beside the tokenizer alone and the scan alone, interleaved
over --repeat rounds, each figure its best round (`mb_per_s`, and per CPU second; `ratio_to_tokenizer`). Per model:
tokens removed, answers changed, and answers that lost a number or a name (`dropped_content`, target 0), on the
answers the patterns were fixed on and on the rest, held out. Last stdout line: one JSON object (`by_language`).

    .venv/bin/python bench/postprocess.py [--limit N] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import orjson

from streams import settings as settings_mod
from streams.output.clean import clean, dropped_content
from streams.output.patterns import load
from streams.text import tokens
from workers.harness.jsonl import iter_field

ARENA = "choices.0.turns.0.content"
# model → (language, file under the shared data folder, field holding the answer)
ANSWERS = {
    "gpt-3.5-turbo": ("en", "arena-hard/answers-gpt-3.5-turbo-0125.jsonl", ARENA),
    "gpt-4": ("en", "arena-hard/answers-gpt-4-0314.jsonl", ARENA),
    "gpt-4o": ("zh", "zh-dev/answers.jsonl", "answer"),
}


def timed(fn, items: list) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this thread's) of fn over the items."""
    wall, cpu = time.perf_counter(), time.thread_time()
    for item in items:
        fn(*item)
    return time.perf_counter() - wall, time.thread_time() - cpu


def throughputs(passes: dict, size_mb: float, repeat: int) -> dict[str, float]:
    """Best MB/s of each pass (name → (fn, argument tuples)) over `repeat` interleaved rounds, by the wall clock
    (`<name>_mb_per_s`) and per CPU second of the one core it ran on (`<name>_mb_per_cpu_s`: what the core does
    when other processes take turns on it, as they do on a shared machine)."""
    wall, cpu = dict.fromkeys(passes, float("inf")), dict.fromkeys(passes, float("inf"))
    for _ in range(repeat):
        for key, (fn, items) in passes.items():
            took = timed(fn, items)
            wall[key], cpu[key] = min(wall[key], took[0]), min(cpu[key], took[1])
    return {
        **{f"{key}_mb_per_s": round(size_mb / seconds, 2) for key, seconds in wall.items()},
        **{f"{key}_mb_per_cpu_s": round(size_mb / seconds, 2) for key, seconds in cpu.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--limit", type=int, default=500, help="answers per model (default 500: all of Arena-Hard's, half of zh-dev's)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved timed rounds; each figure's best counts")
    parser.add_argument(
        "--tuned",
        type=int,
        default=400,
        help="answers per model the patterns were fixed on; the rest are the held-out slice",
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    data = Path(settings_mod.load().shared_data)
    if not (data / "arena-hard").exists() or not (data / "zh-dev").exists():
        print(
            f"no Arena-Hard or zh-dev answers under {data}: set JEV_SHARED_DATA to the shared data folder",
            file=sys.stderr,
        )
        return 2
    patterns = load()
    result: dict = {"patterns_version": patterns.version}
    answers: list[tuple[str, str, str]] = []  # (language, text, model)
    for model, (lang, name, field) in ANSWERS.items():
        texts = [t for _, t in zip(range(args.limit), iter_field(str(data / name), field))]
        answers += [(lang, t, model) for t in texts]
        print(f"{model} ({lang}): cleaning {len(texts)} answers", file=sys.stderr)
        results = [clean(t, model=model, config=patterns) for t in texts]
        before = sum(c.tokens_before for c in results)
        removed = sum(c.tokens_removed for c in results)
        result[model] = {
            "language": lang,
            "answers": len(texts),
            "tokens_before": before,
            "tokens_removed": removed,
            "removed_share": round(removed / before, 4) if before else 0.0,
            "changed_share": round(sum(c.text != t for t, c in zip(texts, results)) / len(texts), 4),
            "flagged": sum(bool(c.flagged) for c in results),
            "dropped_content": {
                "tuned": sum(
                    bool(dropped_content(t, c.text)) for t, c in zip(texts[: args.tuned], results[: args.tuned])
                ),
                "held_out": sum(
                    bool(dropped_content(t, c.text)) for t, c in zip(texts[args.tuned :], results[args.tuned :])
                ),
                "held_out_answers": max(0, len(texts) - args.tuned),
            },
        }
    print(f"timing {len(answers)} answers, {args.repeat} interleaved rounds", file=sys.stderr)
    by_language = {}
    for lang in ("en", "zh", "all"):
        chosen = [(text, model) for language, text, model in answers if lang in (language, "all")]
        size = sum(len(text.encode()) for text, _ in chosen) / 1e6
        encoders = {model: tokens.for_model(model) for _, model in chosen}
        figures = throughputs(
            {
                "clean": (lambda text, model: clean(text, model=model, config=patterns), chosen),
                "tokenizer": (lambda text, model, encoders=encoders: encoders[model].encode_ordinary(text), chosen),
                "scan": (lambda text, _: patterns.scanner.scan(text), chosen),
            },
            size,
            args.repeat,
        )
        by_language[lang] = {
            "mb": round(size, 3),
            "mb_per_s": figures.pop("clean_mb_per_s"),
            **figures,
            "ratio_to_tokenizer": round(figures["clean_mb_per_cpu_s"] / figures["tokenizer_mb_per_cpu_s"], 3),
        }
        print(f"{lang}: {by_language[lang]}", file=sys.stderr)
    result.update(by_language.pop("all"), by_language=by_language, target_mb_per_s=5.0)
    print(orjson.dumps(result).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
