"""Scoring batched across requests vs one request at a time, per CPU backend, on the same decisions.

Decisions from STS-B train; for each backend one fresh instance scores every decision one by one (`score`) and
another in micro-batches of --batch as the scoring worker does (streams/scoring/microbatch.py: one `score_many`
call where the worker batches for the backend, `batched`, else one call each), alternating micro-batch by
micro-batch, each with its own empty encoding cache. Per backend: candidates/s each way, `speedup` (wall clock),
`cpu_speedup`, `max_score_diff` and whether the metered tokens are identical.
Last stdout line: {speedup, max_score_diff (both of MiniLM), speedup_by_backend, cpu_speedup_by_backend,
worker_batches (the backends the worker batches for), config, load_average, backends: {name: {...}}}.

    .venv/bin/python bench/batching.py [--requests 64] [--batch 16] [--candidates 20] [--smollm2-requests 4]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

import orjson

from streams import settings as settings_mod
from streams.core import encodings
from streams.models import loaded as models
from streams.models import registry
from streams.scoring.microbatch import batches, score_many
from streams.scoring.steps import Call


def decisions(sts_dir: Path, n: int, candidates: int, seed: int = 5) -> list[tuple[str, list[str]]]:
    pairs = []
    for line in (sts_dir / "train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 7:
            pairs.append((fields[5].strip(), fields[6].strip()))
    rng = random.Random(seed)
    pool = [b for _, b in pairs]
    out = []
    for state, answer in rng.sample(pairs, n):
        cands = [answer, *rng.sample(pool, candidates - 1)]
        rng.shuffle(cands)
        out.append((state, cands))
    return out


def measure(name: str, items: list[tuple[str, list[str]]], batch: int) -> dict:
    """Interleaved on a shared machine: each micro-batch is scored one by one, then batched, before the next."""
    single, batched = registry.scorer(name), registry.scorer(name)
    one, many, clock = [], [], {"one_wall": 0.0, "one_cpu": 0.0, "many_wall": 0.0, "many_cpu": 0.0}
    caches = {way: encodings.EncodingCache(64 * 2**20) for way in ("one", "many")}
    for i in range(0, len(items), batch):
        group = items[i : i + batch]
        for way, run, out in (
            ("one", lambda group=group: [single.score(c, cands) for c, cands in group], one),
            ("many", lambda group=group: score_many(batched, [Call(batched, c, cands) for c, cands in group]), many),
        ):
            wall, cpu = time.perf_counter(), time.process_time()
            with encodings.using(caches[way]):
                out.extend(run())
            clock[f"{way}_wall"] += time.perf_counter() - wall
            clock[f"{way}_cpu"] += time.process_time() - cpu
    n = sum(len(c) for _, c in items)
    diff = max(abs(a - b) for o, m in zip(one, many) for a, b in zip(o.scores, m.scores))
    same_tokens = all(
        (o.input_tokens, o.cache_read_tokens, o.output_tokens) == (m.input_tokens, m.cache_read_tokens, m.output_tokens)
        for o, m in zip(one, many)
    )
    return {
        "batched": batches(batched),
        "requests": len(items),
        "batch": batch,
        "candidates": n,
        "one_by_one_candidates_per_s": round(n / clock["one_wall"], 1),
        "batched_candidates_per_s": round(n / clock["many_wall"], 1),
        "speedup": round(clock["one_wall"] / clock["many_wall"], 3),
        "cpu_speedup": round(clock["one_cpu"] / clock["many_cpu"], 3),
        "max_score_diff": float(f"{diff:.3g}"),
        "same_tokens": same_tokens,
        "input_tokens": sum(m.input_tokens for m in many),
        "cache_read_tokens": sum(m.cache_read_tokens for m in many),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=64, help="decisions per backend (MiniLM, lexical)")
    ap.add_argument("--batch", type=int, default=16, help="requests per micro-batch")
    ap.add_argument("--candidates", type=int, default=20, help="candidates per decision")
    ap.add_argument("--smollm2-requests", type=int, default=4, help="decisions for SmolLM2 (CPU-bound: ~100 tokens/s)")
    ap.add_argument("--smollm2-candidates", type=int, default=5)
    args = ap.parse_args()
    settings = settings_mod.load()
    models.configure(settings.model_threads)
    sts = Path(settings.shared_data) / "sts-b"
    plans = [
        ("lexical", args.requests, args.candidates),
        ("minilm", args.requests, args.candidates),
        ("smollm2", args.smollm2_requests, args.smollm2_candidates),
    ]
    results = {}
    for name, n, k in plans:
        if name != "lexical" and not models.available(name):
            results[name] = {"skipped": f"{name} is not installed"}
            continue
        results[name] = measure(name, decisions(sts, n, k), args.batch)
        print(f"{name}: {orjson.dumps(results[name]).decode()}", file=sys.stderr, flush=True)
    minilm = results.get("minilm", {})
    measured = {name: r for name, r in results.items() if "speedup" in r}
    print(
        orjson.dumps(
            {
                "speedup": minilm.get("speedup"),
                "max_score_diff": minilm.get("max_score_diff"),
                "same_tokens": minilm.get("same_tokens"),
                "speedup_by_backend": {name: r["speedup"] for name, r in measured.items()},
                "cpu_speedup_by_backend": {name: r["cpu_speedup"] for name, r in measured.items()},
                "worker_batches": [name for name, r in measured.items() if r["batched"]],
                "config": {**vars(args), "model_threads": settings.model_threads},
                "load_average": os.getloadavg()[0],
                "backends": results,
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
