"""Calibrate and evaluate the L2 decision (cosine >= threshold AND verification) on labeled pairs.

Pairs files hold one {"text_a", "text_b", "label": 0|1} per line. The threshold is chosen per embedder
(cosines of different models are not comparable) and saved under data_dir/cache_thresholds.json; with a
model check (modelcheck.py) both thresholds are chosen together and saved under "<embedder>+<check>".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from streams.cache.embedders import Embedder
from streams.cache.guards import verify
from streams.cache.modelcheck import ModelCheck

# Used until `jev cache calibrate` saves one: STS-B dev at target precision 0.95 (see bench/cache_precision.py).
DEFAULT_THRESHOLDS = {"minilm": 0.75, "hashing": 0.82, "e5": 0.915, "minilm+e5": 0.68, "hashing+e5": 0.29}
# by-language (MiniLM for English, e5 else): the lower of the two floors, so English candidates are met as with
# MiniLM alone; a Chinese candidate's e5 cosine is one of the verifier's features, which judges it above this
DEFAULT_THRESHOLDS["minilm|e5"] = DEFAULT_THRESHOLDS["minilm"]
DEFAULT_CHECK_THRESHOLDS = {"minilm+e5": 0.899, "hashing+e5": 0.925}
MIN_HITS = 20  # a precision measured on fewer predicted hits is not trusted as an operating point


@dataclass(frozen=True)
class Pair:
    text_a: str
    text_b: str
    label: int


def read_pairs(path: str | Path) -> list[Pair]:
    pairs = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
            pairs.append(Pair(str(row["text_a"]), str(row["text_b"]), int(row["label"])))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f'{path}:{n}: expected {{"text_a": ..., "text_b": ..., "label": 0|1}} ({e})') from None
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def stsb_pairs(stsb_dir: str | Path, split: str = "dev") -> list[Pair]:
    """STS-B pairs scored >= 4 (paraphrases) as 1 and <= 2 (different meaning) as 0; the middle is skipped."""
    path = Path(stsb_dir) / f"{split}.tsv"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: point JEV_SHARED_DATA at the folder holding sts-b/")
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        try:
            score = float(fields[4])
        except (IndexError, ValueError):
            continue
        if score >= 4 or score <= 2:
            pairs.append(Pair(fields[5], fields[6], int(score >= 4)))
    return pairs


def cosines(embedder: Embedder, pairs: list[Pair]) -> np.ndarray:
    texts = list(dict.fromkeys(t for p in pairs for t in (p.text_a, p.text_b)))
    vectors = dict(zip(texts, embedder.embed(texts)))
    return np.array([float(vectors[p.text_a] @ vectors[p.text_b]) for p in pairs])


def metrics(hits: np.ndarray, labels: np.ndarray) -> dict:
    tp = int((hits & (labels == 1)).sum())
    n_hits, positives = int(hits.sum()), int((labels == 1).sum())
    return {
        "precision": tp / n_hits if n_hits else 1.0,
        "recall": tp / positives if positives else 0.0,
        "hit_rate": n_hits / len(labels),
        "pairs": len(labels),
        "hits": n_hits,
        "false_hits": n_hits - tp,
    }


def pick_threshold(scores: np.ndarray, verified: np.ndarray, labels: np.ndarray, target_precision: float) -> dict:
    """The lowest threshold (most recall) whose hits reach `target_precision`, over at least MIN_HITS hits."""
    best = None
    for t in np.unique(np.round(scores, 4))[::-1]:
        m = metrics((scores >= t) & verified, labels)
        if m["hits"] >= MIN_HITS and m["precision"] >= target_precision:
            best = {"threshold": float(t), **m}
    if best is None:
        raise ValueError(
            f"no threshold reaches precision {target_precision} over >= {MIN_HITS} hits on these "
            f"pairs: lower --target-precision or add pairs"
        )
    return best


def pick_thresholds(
    scores: np.ndarray, check_scores: np.ndarray, verified: np.ndarray, labels: np.ndarray, target_precision: float
) -> dict:
    """Both thresholds of a decision with a model check: the most recall whose hits reach `target_precision`
    over at least MIN_HITS hits (ties: the higher precision, then the higher first threshold, so fewer
    candidates reach the costlier check). Both thresholds step by 0.01 and 0.001 on a grid, never sitting
    on a pair's own score (where embedding one text at a time or in a batch could tip it)."""
    best, best_key = None, None
    grid = np.unique(np.floor(check_scores * 1000) / 1000)
    for t in np.unique(np.round(scores, 2)):
        passed = (scores >= t) & verified
        order = np.argsort(check_scores[passed])
        ranked, positive = check_scores[passed][order], labels[passed][order] == 1
        positives_from = np.r_[np.cumsum(positive[::-1])[::-1], 0]  # positives at or after each rank
        first = np.searchsorted(ranked, grid, side="left")  # the first rank a check threshold admits
        hits, tp = len(ranked) - first, positives_from[first]
        ok = np.flatnonzero((hits >= MIN_HITS) & (tp >= target_precision * hits))
        if len(ok):
            i = ok[np.lexsort((tp[ok] / hits[ok], tp[ok]))[-1]]
            if best_key is None or (tp[i], tp[i] / hits[i]) >= best_key:  # ties: the higher first threshold
                best, best_key = (float(t), float(grid[i])), (tp[i], tp[i] / hits[i])
    if best is None:
        raise ValueError(
            f"no thresholds reach precision {target_precision} over >= {MIN_HITS} hits on these "
            f"pairs: lower --target-precision or add pairs"
        )
    t, c = best
    return {"threshold": t, "check_threshold": c, **metrics((scores >= t) & verified & (check_scores >= c), labels)}


def decide(
    embedder: Embedder,
    pairs: list[Pair],
    threshold: float,
    use_verify: bool = True,
    progress: Callable[[Iterable], Iterable] = iter,
    check: ModelCheck | None = None,
) -> list[dict]:
    """The full L2 decision per pair, as served: embed the query (the cached side is already embedded),
    cosine, verification, then the model check if any; latency_ms covers them all."""
    texts_b = list(dict.fromkeys(p.text_b for p in pairs))
    cached = dict(zip(texts_b, embedder.embed(texts_b)))
    if check is not None:
        check.prepare(texts_b)
    rows = []
    for p in progress(pairs):
        start = time.perf_counter()
        score = float(embedder.embed([p.text_a])[0] @ cached[p.text_b])
        verdict = verify(p.text_a, p.text_b) if use_verify and score >= threshold else None
        hit = score >= threshold and (verdict is None or verdict.ok)
        refused = verdict.reason if verdict and not verdict.ok else ""
        row = {"text_a": p.text_a, "text_b": p.text_b, "label": p.label, "cosine": round(score, 4)}
        if check is not None and hit:
            row["check_cosine"] = round(check.score(p.text_a, p.text_b), 4)
            hit = row["check_cosine"] >= check.threshold
            refused = "" if hit else "model"
        rows.append({**row, "hit": hit, "refused": refused, "latency_ms": (time.perf_counter() - start) * 1000})
    return rows


def summarize(rows: list[dict]) -> dict:
    m = metrics(np.array([r["hit"] for r in rows]), np.array([r["label"] for r in rows]))
    latency = np.array([r["latency_ms"] for r in rows])
    return {
        **m,
        "latency_p50_ms": float(np.percentile(latency, 50)),
        "latency_p99_ms": float(np.percentile(latency, 99)),
    }


class ThresholdStore:
    """Calibrated thresholds per embedder, in one small JSON file."""

    def __init__(self, data_dir: str | Path):
        self.path = Path(data_dir) / "cache_thresholds.json"

    def all(self) -> dict:
        return orjson.loads(self.path.read_bytes()) if self.path.exists() else {}

    def save(self, embedder: str, record: dict) -> None:
        data = self.all() | {embedder: record}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        tmp.replace(self.path)

    def threshold(self, embedder: str, configured: float = 0.0) -> float:
        """The configured threshold if set, else the calibrated one, else the built-in default."""
        if configured > 0:
            return configured
        saved = self.all().get(embedder)
        return float(saved["threshold"]) if saved else DEFAULT_THRESHOLDS.get(embedder, 0.9)

    def check_threshold(self, decision: str) -> float:
        """The model check's threshold of a "<embedder>+<check>" decision: calibrated, else the default."""
        saved = self.all().get(decision)
        if saved and "check_threshold" in saved:
            return float(saved["check_threshold"])
        return DEFAULT_CHECK_THRESHOLDS.get(decision, 0.9)
