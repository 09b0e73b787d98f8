"""Cascade quality vs cost on labelled decisions built from STS-B, with the default CPU tiers.

Each decision: an STS-B sentence (pair score >= 4) as the state, its pair as the right candidate among hard and
random distractors. Cascade, fine-only and coarse-only run on the same decisions with `jev score`'s code;
token_ratio = cascade tokens ÷ fine-only tokens. --out writes the decisions as `jev score` input instead
(sts-dev.jsonl and a held-out fifth, sts-heldout.jsonl). Last stdout line: one JSON object.

    .venv/bin/python bench/cascade.py [--limit 200] [--candidates 20] [--out DIR]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import orjson

from schemas.records import Candidate, Request
from streams import settings as settings_mod
from streams.core import encodings
from streams.models import lexical, registry
from streams.scoring.cascade import jaccard
from streams.scoring.engine import MODES, Engine
from streams.scoring.policy import load as load_policy
from workers.cli.commands.score import score


def read_pairs(sts_dir: Path) -> list[tuple[str, str]]:
    pairs = []
    for name in ("dev.tsv", "test.tsv"):
        for line in (sts_dir / name).read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            if len(fields) >= 7 and float(fields[4]) >= 4.0 and fields[5].strip() != fields[6].strip():
                pairs.append((fields[5].strip(), fields[6].strip()))
    return pairs


def build_decisions(
    pairs: list[tuple[str, str]], limit: int, n_candidates: int, pool: list[str], vectors, seed: int = 7
):
    rng = random.Random(seed)
    chosen = rng.sample(pairs, min(limit, len(pairs)))
    index = {text: i for i, text in enumerate(pool)}
    bags = [set(lexical.words(t)) for t in pool]
    hard_each = (n_candidates - 1) // 3
    decisions = []
    for number, (state, answer) in enumerate(chosen):
        banned = {answer, state}
        state_bag = set(lexical.words(state))
        by_meaning = np.argsort(-(vectors @ vectors[index[answer]]))
        by_words = sorted(range(len(pool)), key=lambda i: -jaccard(state_bag, bags[i]))
        picked: list[str] = []
        for ranked in (by_meaning, by_words):
            taken = 0
            for i in ranked:
                if taken == hard_each:
                    break
                if pool[i] not in banned and pool[i] not in picked:
                    picked.append(pool[i])
                    taken += 1
        while len(picked) < n_candidates - 1:
            text = rng.choice(pool)
            if text not in banned and text not in picked:
                picked.append(text)
        texts = [answer, *picked]
        rng.shuffle(texts)
        candidates = [Candidate(id=f"c{i}", text=t) for i, t in enumerate(texts)]
        request = Request(
            request_id=f"sts-{number}",
            tenant="bench",
            service="cascade",
            decision_type="ranking",
            state=state,
            candidates=candidates,
        )
        decisions.append((request, f"c{texts.index(answer)}"))
    return decisions


HELD_OUT = 5  # one decision in this many is held out (--out)


def write_decisions(decisions, out: Path) -> dict:
    """The decisions as `jev score` input lines, split dev / held-out by a hash of the state."""
    out.mkdir(parents=True, exist_ok=True)
    lines = {"dev": [], "heldout": []}
    for request, label in decisions:
        split = "heldout" if zlib.crc32(request.state.encode()) % HELD_OUT == 0 else "dev"
        lines[split].append(
            orjson.dumps(
                {
                    "request_id": request.request_id,
                    "decision_type": request.decision_type,
                    "state": request.state,
                    "label": label,
                    "candidates": [{"id": c.id, "text": c.text} for c in request.candidates],
                }
            )
        )
    counts = {}
    for split, rows in lines.items():
        path = out / f"sts-{split}.jsonl"
        path.write_bytes(b"".join(row + b"\n" for row in rows))
        counts[path.name] = len(rows)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="decisions (default 200)")
    parser.add_argument("--candidates", type=int, default=20, help="candidates per decision (default 20)")
    parser.add_argument("--fine", default="auto", help="fine tier backend (default auto: minilm)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the decisions as jev score input (sts-dev.jsonl, sts-heldout.jsonl) and stop",
    )
    args = parser.parse_args()
    settings = settings_mod.load()
    sts = Path(settings.shared_data) / "sts-b"
    if not (sts / "dev.tsv").exists():
        print(f"STS-B not found under {sts}: set JEV_SHARED_DATA to the shared data folder", file=sys.stderr)
        return 2
    fine = registry.scorer(args.fine)
    minilm = fine if fine.name == "minilm" else registry.scorer("minilm")
    print(f"building {args.limit} decisions of {args.candidates} candidates", file=sys.stderr)
    pairs = read_pairs(sts)
    pool = sorted({b for _, b in pairs})
    # Encoded through the encoding cache: the pool's embeddings then serve the fine tier's candidates too
    # (cache reads still count as input).
    vectors = [e.value for e in encodings.shared().get_many(minilm.model, pool, minilm.embed, minilm.tokens)]
    decisions = build_decisions(pairs, args.limit, args.candidates, pool, vectors)
    if args.out is not None:
        print(orjson.dumps({"out": str(args.out), "decisions": write_decisions(decisions, args.out)}).decode())
        return 0
    config = load_policy(settings.decision_types)
    results = {}
    for mode in MODES:
        started = time.perf_counter()
        engine = Engine(coarse=lexical.LexicalBackend(), fine=fine, config=config, mode=mode)
        _, summary = score(engine, decisions, settings.default_model)
        summary["seconds"] = round(time.perf_counter() - started, 2)
        results[mode] = summary
        print(f"{mode}: {summary}", file=sys.stderr)
    best_single = max(results["fine-only"]["accuracy"], results["coarse-only"]["accuracy"])
    fine_tokens = results["fine-only"]["tokens_actual"] or 1
    print(
        orjson.dumps(
            {
                "decisions": len(decisions),
                "candidates": args.candidates,
                "fine": fine.name,
                "coarse": "lexical",
                "accuracy_cascade": results["cascade"]["accuracy"],
                "accuracy_fine_only": results["fine-only"]["accuracy"],
                "accuracy_coarse_only": results["coarse-only"]["accuracy"],
                "accuracy_gap_to_best_single": round(best_single - results["cascade"]["accuracy"], 4),
                "tokens_cascade": results["cascade"]["tokens_actual"],
                "tokens_fine_only": results["fine-only"]["tokens_actual"],
                "tokens_nominal": results["fine-only"]["tokens_nominal"],
                "token_ratio": round(results["cascade"]["tokens_actual"] / fine_tokens, 4),
            }
        ).decode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
