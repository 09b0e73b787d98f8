"""Offline fit of the L2 verifier's starting weights from labelled pairs (`jev cache train-verifier`).

The verifier is fitted on the candidates L2 really meets: every `text_a` is cached, every `text_b` asks, and its
best verified neighbour becomes a training row, right only when it is the pair's own `text_a` and the pair is
labelled 1. A hash-drawn share of the pairs is kept out of the fit as calibration verdicts; the summary counts
wrong candidates among the top N there (`errors_top_N`) and, per error bound, what the certifying test would serve
from them alone (`certifies`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from streams.cache.calibration import Pair
from streams.cache.entry import Entry
from streams.cache.evidence import CALIBRATION, POOL, PooledEvidence
from streams.cache.exact import normalize
from streams.cache.learning import ThresholdLearner
from streams.cache.replay import PARTITION
from streams.cache.semantic import SemanticCache, _same_question
from streams.cache.verifier import FEATURES, Verifier, fit, standardizer

CALIBRATION_SHARE = 0.5  # of the pairs, by hash: kept out of the fit, their candidates calibrate it
BOUNDS = (0.05, 0.1, 0.2)  # error bounds `certifies` is reported at (besides the configured one)


def held_for_calibration(pair: Pair) -> bool:
    digest = hashlib.blake2b(f"{pair.text_a}\x00{pair.text_b}\x01".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < CALIBRATION_SHARE


def mine(cache: SemanticCache, pairs: list[Pair]) -> tuple[np.ndarray, np.ndarray]:
    """(feature rows, 1 right / 0 wrong) of the best verified neighbour of every `text_b`; `cache` empty,
    with evidence."""
    questions = list(dict.fromkeys(p.text_a for p in pairs))
    cache.insert_many(PARTITION, questions, [Entry({"question": q}, level="l2") for q in questions])
    cached = {normalize(q) for q in questions}
    asked = [p for p in pairs if normalize(p.text_b) not in cached]  # L1's, as in replay
    vectors = cache.embedder.embed([p.text_b for p in asked])
    rows, labels = [], []
    for pair, vector in zip(asked, vectors):
        _, candidate = cache.probe(PARTITION, pair.text_b, np.asarray(vector))
        if candidate is not None:
            rows.append(candidate.features)
            labels.append(pair.label == 1 and _same_question(candidate.question) == _same_question(pair.text_a))
    return np.array(rows, dtype=np.float64).reshape(-1, len(FEATURES)), np.array(labels, dtype=np.float64)


def certifiable(scores: np.ndarray, agreed: np.ndarray, bounds=BOUNDS, confidence: float = 0.9) -> dict:
    """Per bound, what the first certifying test would serve from these verdicts alone (scored by the verifier):
    {"served": candidates at or above the certified threshold, "errors": the disagreements among them}."""
    agreed = np.asarray(agreed, dtype=bool)
    out = {}
    for bound in sorted(set(bounds)):
        learner = ThresholdLearner(bound, confidence, explore=0.0)
        for score, ok in zip(scores, agreed):
            learner.observe(POOL, CALIBRATION, float(score), bool(ok))
        served = np.asarray(scores) >= learner.threshold(POOL)
        out[str(bound)] = {"served": int(served.sum()), "errors": int((served & ~agreed).sum())}
    return out


def train(
    embedder, pairs: list[Pair], floor: float, check=None, ridge: float = 1.0, bounds=BOUNDS, confidence: float = 0.9
) -> tuple[Verifier, dict]:
    """(the verifier, a summary): logistic regression on the candidates mined from the fitting part of the pairs,
    standardized by their own columns (verifier.standardizer: the scale live refits and scores use too), a weak
    ridge towards zero; the calibration part's candidates are the verifier's calibration verdicts. The summary's
    `certifies` is taken at `bounds` with `confidence` (certifiable)."""
    mined = []
    for part in ([p for p in pairs if not held_for_calibration(p)], [p for p in pairs if held_for_calibration(p)]):
        never = PooledEvidence(Verifier(np.zeros(len(FEATURES))), ThresholdLearner(explore=0.0))
        cache = SemanticCache(embedder, floor, check=check, evidence=never, max_entries=max(len(part), 1))
        mined.append(mine(cache, part) if part else (np.zeros((0, len(FEATURES))), np.zeros(0)))
    (rows, labels), (held, held_labels) = mined
    verifier, summary = fit_rows(rows, labels, held, held_labels, ridge, bounds, confidence)
    return verifier, {"pairs": len(pairs), **summary}


def fit_rows(
    rows: np.ndarray,
    labels: np.ndarray,
    held: np.ndarray,
    held_labels: np.ndarray,
    ridge: float = 1.0,
    bounds=BOUNDS,
    confidence: float = 0.9,
) -> tuple[Verifier, dict]:
    """(the verifier fitted on `rows`, whose calibration verdicts are `held`; a summary): the fit shared by labelled
    pairs (train) and decision traffic (`jev cache train-verifier --decisions`, agreement with the naive path as
    the label)."""
    if len(rows) < 2 * len(FEATURES) or labels.min(initial=1) == labels.max(initial=0):
        raise ValueError(
            f"{len(rows)} candidates ({int(labels.sum())} right) are too few to fit {len(FEATURES)} "
            "weights: give more labelled pairs, with both labels, or lower --floor"
        )
    shift, spread = standardizer(rows)
    weights = fit((rows - shift) / spread, labels, np.zeros(len(FEATURES)), ridge=ridge)
    verifier = Verifier(weights, calibration=(held, held_labels.astype(bool)), shift=shift, spread=spread)
    scores = verifier.probabilities(held)  # what the live test compares
    order = np.argsort(-scores, kind="stable")
    top = {f"errors_top_{n}": int(n - held_labels[order[:n]].sum()) for n in (50, 100, 200, 500) if n <= len(held)}
    return verifier, {
        "candidates": len(rows),
        "right": int(labels.sum()),
        "calibration_candidates": len(held),
        "calibration_right": int(held_labels.sum()),
        **top,
        "certifies": certifiable(scores, held_labels.astype(bool), bounds, confidence),
    }
