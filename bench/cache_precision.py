"""L2 precision and recall: cosine alone, + verification, + the model check, per embedder, side by side.

Thresholds are calibrated on STS-B dev to --target-precision and held out on STS-B test (>= 4 duplicates, <= 2
different) through `jev cache evaluate`'s fixed-threshold path, pair by pair; --pairs adds JSONL text_a/text_b/label
files. The live stage serves L2 hits by thresholds learned from verdicts instead: bench/cache_replay.py measures that.
Last stdout line: one JSON object.

    .venv/bin/python bench/cache_precision.py [--target-precision 0.95] [--limit 300 (0 = all)] [--pairs FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import orjson

from streams.cache import calibration
from streams.cache.embedders import load_embedder
from streams.cache.guards import verify
from streams.cache.modelcheck import ModelCheck
from streams.settings import load


def _round(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def _refusals(rows: list[dict]) -> dict:
    reasons = sorted({r["refused"] for r in rows if r["refused"]})
    return {reason: sum(r["refused"] == reason for r in rows) for reason in reasons}


def _loaded(names: str) -> dict:
    models = {}
    for name in names.split(","):
        try:
            models[name] = load_embedder(name)
        except RuntimeError as e:
            print(f"skipping {name}: {e}", file=sys.stderr)
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-precision", type=float, default=0.95)
    ap.add_argument("--limit", type=int, default=300, help="held-out pairs per set (0 = all)")
    ap.add_argument("--embedders", default="hashing,minilm")
    ap.add_argument("--checks", default="e5", help="second-opinion models of the model check ('' = none)")
    ap.add_argument("--pairs", action="append", default=[], help="extra labeled pairs to hold out")
    args = ap.parse_args()
    stsb = Path(load().shared_data) / "sts-b"
    dev = calibration.stsb_pairs(stsb, "dev")
    held_out = {"stsb_test": calibration.stsb_pairs(stsb, "test")}
    held_out |= {Path(p).stem: calibration.read_pairs(p) for p in args.pairs}
    if args.limit:
        held_out = {k: v[:: max(1, len(v) // args.limit)][: args.limit] for k, v in held_out.items()}  # every genre
    labels = np.array([p.label for p in dev])
    verified = np.array([verify(p.text_a, p.text_b).ok for p in dev])
    result = {"target_precision": args.target_precision, "calibration_pairs": len(dev)}
    checks = _loaded(args.checks) if args.checks else {}
    check_scores = {name: calibration.cosines(model, dev) for name, model in checks.items()}
    for name, embedder in _loaded(args.embedders).items():
        print(f"{name}: calibrating on STS-B dev", file=sys.stderr)
        scores = calibration.cosines(embedder, dev)
        plain = calibration.pick_threshold(scores, np.ones_like(verified), labels, args.target_precision)
        checked = calibration.pick_threshold(scores, verified, labels, args.target_precision)
        result[name] = {"plain_threshold": plain["threshold"], "verify_threshold": checked["threshold"]}
        joint = {
            check: calibration.pick_thresholds(scores, check_scores[check], verified, labels, args.target_precision)
            for check in checks
            if check != name
        }
        result[name] |= {f"{check}_thresholds": [p["threshold"], p["check_threshold"]] for check, p in joint.items()}
        for set_name, pairs in held_out.items():
            print(f"{name}: evaluating {set_name} ({len(pairs)} pairs)", file=sys.stderr)
            rows = calibration.decide(embedder, pairs, checked["threshold"])
            set_labels = np.array([r["label"] for r in rows])
            plain_hits = np.array([r["cosine"] >= plain["threshold"] for r in rows])
            out = result[name][set_name] = {
                "plain": _round(calibration.metrics(plain_hits, set_labels)),
                "verify": _round(calibration.summarize(rows)),
                "refusals": _refusals(rows),
            }
            for check, point in joint.items():
                print(f"{name}: evaluating {set_name} with the {check} model check", file=sys.stderr)
                rows = calibration.decide(
                    embedder, pairs, point["threshold"], check=ModelCheck(checks[check], point["check_threshold"])
                )
                out[f"verify_{check}"] = _round(calibration.summarize(rows))
                out[f"verify_{check}_refusals"] = _refusals(rows)
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
