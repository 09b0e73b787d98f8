"""L2 with learned thresholds, replayed on labelled pairs it never saw: precision and recall per target error.

qqp-dev is split by a hash of each pair into a held-out slice (~30%) and a dev part; the shipped verifier weights
were fitted on the dev part only, and the learner starts empty on each replay. Each run replays a slice through
the live L2 decision (streams/cache/replay.py) at each --targets error bound, in file order and --seeds shuffled
orders, and STS-B test pairs the same way. Last stdout line: one JSON object.

    .venv/bin/python bench/cache_replay.py [--slice held_out|dev|both] [--targets 0.05,0.1,0.2] [--write DIR]
        [--promote-margins 0,0.2]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import orjson

from streams.cache import calibration
from streams.cache.embedders import load_embedder
from streams.cache.evidence import PooledEvidence
from streams.cache.learning import ThresholdLearner
from streams.cache.replay import replay
from streams.cache.semantic import SemanticCache
from streams.cache.verifier import load_verifier
from streams.settings import load

HELD_OUT_SHARE = 77 / 256  # first hash byte below 77: the held-out slice


def held_out(pair: calibration.Pair) -> bool:
    digest = hashlib.blake2b(f"{pair.text_a}\x00{pair.text_b}".encode(), digest_size=8).digest()
    return digest[0] < 77


class Memo:
    """An embedder that embeds each text once over all the runs of this benchmark."""

    def __init__(self, inner):
        self.inner, self.name, self.dim, self.seen = inner, inner.name, inner.dim, {}

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if missing:
            self.seen.update(zip(missing, self.inner.embed(missing)))
        return np.stack([self.seen[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def run(
    embedder,
    pairs,
    floor: float,
    target: float,
    confidence: float,
    shadow_rate: float,
    seed,
    explore: float,
    data_dir: str,
    promote_margin: float = 0.0,
) -> dict:
    """One replay through the live L2 decision: the learned verifier, one threshold certified from verdicts."""
    evidence = PooledEvidence(
        load_verifier(embedder.name, data_dir), ThresholdLearner(target, confidence, explore=explore)
    )
    cache = SemanticCache(embedder, floor, evidence=evidence, max_entries=len(pairs), promote_margin=promote_margin)
    out = replay(cache, pairs, shadow_rate, seed=seed)
    return {
        k: (round(v, 4) if isinstance(v, float) else v) for k, v in out.items() if k not in ("threshold_moves", "curve")
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slice", default="held_out", choices=["held_out", "dev", "both"])
    ap.add_argument("--targets", default="0.05,0.1,0.2")
    ap.add_argument("--confidence", type=float, default=0.9)
    ap.add_argument("--shadow-rate", type=float, default=0.02)
    ap.add_argument("--seeds", default="1", help="shuffled orders besides file order ('' = file order only)")
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--explore", default="0.05", help="exploration rates above the threshold to compare")
    ap.add_argument("--no-stsb", action="store_true")
    ap.add_argument(
        "--promote-margins",
        help="near-miss promotion bands to compare, e.g. 0,0.2 (0: no promotion; default: JEV_CACHE_PROMOTE_MARGIN)",
    )
    ap.add_argument(
        "--write",
        help="also write the two qqp slices to DIR/qqp_held_out.jsonl and DIR/qqp_dev.jsonl "
        "(for `jev cache replay --pairs`), then replay",
    )
    args = ap.parse_args()
    settings = load()
    data = Path(settings.shared_data)
    qqp = calibration.read_pairs(data / "qqp-dev" / "pairs.jsonl")
    slices = {"held_out": [p for p in qqp if held_out(p)], "dev": [p for p in qqp if not held_out(p)]}
    if args.write:
        for name, pairs in slices.items():
            Path(args.write, f"qqp_{name}.jsonl").write_bytes(
                b"".join(
                    orjson.dumps({"text_a": p.text_a, "text_b": p.text_b, "label": p.label}) + b"\n" for p in pairs
                )
            )
    chosen = ["held_out", "dev"] if args.slice == "both" else [args.slice]
    sets = {f"qqp_{name}": slices[name] for name in chosen}
    if not args.no_stsb:
        sets["stsb_test"] = calibration.stsb_pairs(data / "sts-b", "test")
    embedder = Memo(load_embedder(args.embedder))
    floor = calibration.ThresholdStore(settings.data_dir).threshold(embedder.name, settings.cache_semantic_threshold)
    seeds = [None] + [int(s) for s in args.seeds.split(",") if s]
    margins = (
        [float(m) for m in args.promote_margins.split(",")] if args.promote_margins else [settings.cache_promote_margin]
    )
    result = {
        "embedder": embedder.name,
        "floor": floor,
        "confidence": args.confidence,
        "shadow_rate": args.shadow_rate,
        "held_out_share": round(HELD_OUT_SHARE, 3),
    }
    for set_name, pairs in sets.items():
        result[set_name] = {"pairs": len(pairs), "positives": sum(p.label for p in pairs), "runs": []}
        for target in (float(t) for t in args.targets.split(",")):
            for explore in (float(e) for e in args.explore.split(",")):
                for seed in seeds:
                    for margin in margins:
                        print(
                            f"{set_name}: target {target}, explore {explore}, order {seed or 'file'}, promote "
                            f"margin {margin}",
                            file=sys.stderr,
                        )
                        out = run(
                            embedder,
                            pairs,
                            floor,
                            target,
                            args.confidence,
                            args.shadow_rate,
                            seed,
                            explore,
                            settings.data_dir,
                            margin,
                        )
                        result[set_name]["runs"].append({"seed": seed, "explore": explore, **out})
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
