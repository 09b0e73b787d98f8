"""Replay a labelled pairs file as traffic through the live L2 decision (`jev cache replay`).

Every `text_a` is asked first and fills the cache as a miss would; then every `text_b` is asked, in file order or
shuffled by a seed, through SemanticCache.probe with the partition's learned threshold, the label standing in for
the shadow comparison (served hits, explored near-misses, promotions). A hit is right only when it hit its own
pair's `text_a` and the pair is labelled 1. The learner starts with the verifier's calibration verdicts only, as a
fresh deployment does. Reports hits, false hits, `hit_ratio`, `per_request_error`, the run's `curve` and why
nothing was certified (`certification`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import numpy as np

from streams.cache.calibration import Pair
from streams.cache.entry import Entry
from streams.cache.evidence import POOL
from streams.cache.exact import normalize
from streams.cache.semantic import SemanticCache, _same_question

PARTITION = ("replay", "pairs", "", "latin", "generate:256")
CURVE_POINTS = 20  # points of the precision / hit-ratio curve over the run


def replay(
    cache: SemanticCache,
    pairs: list[Pair],
    shadow_rate: float,
    seed: int | None = None,
    explore: bool = True,
    progress: Callable[[Iterable], Iterable] = iter,
) -> dict:
    """Counts of the replay (see the module doc); `cache` must be empty, with a learner."""
    if not 0 <= shadow_rate <= 1:
        raise ValueError(f"shadow rate must be in [0, 1], got {shadow_rate}")
    if cache.learner is None:
        raise ValueError("replay needs a SemanticCache with a ThresholdLearner (the live L2 decision)")
    questions = list(dict.fromkeys(p.text_a for p in pairs))
    cache.insert_many(PARTITION, questions, [Entry({"question": q}, level="l2") for q in questions])
    order = list(range(len(pairs)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    cached = {normalize(q) for q in questions}
    asked = [pairs[i] for i in order if normalize(pairs[i].text_b) not in cached]
    vectors = cache.embedder.embed([p.text_b for p in asked])
    rng = random.Random(0 if seed is None else seed)

    def threshold_of() -> float:
        if cache.evidence is not None:
            return cache.evidence.threshold()
        assert cache.learner is not None, "a replay runs a learning cache"
        return cache.learner.threshold(PARTITION)

    hits = right = explored = learned = judged = promoted_hits = promoted_right = strict_false = 0
    promoted_by: dict[str, int] = {}  # a promoted question -> the label of the pair whose judgement promoted it
    moves: list[tuple[int, float]] = []
    curve: list[list] = []  # (pairs asked, threshold) each time the threshold moves; (asked, hit ratio, precision)
    step = max(len(asked) // CURVE_POINTS, 1)
    for n, (pair, vector) in enumerate(progress(zip(asked, vectors)), 1):
        hit, candidate = cache.probe(PARTITION, pair.text_b, np.asarray(vector))
        if candidate is not None:
            entry = cache.entry_of(PARTITION, candidate.question)
            target = entry.alias_of if entry is not None and entry.alias_of else candidate.question
            correct = pair.label == 1 and _same_question(target) == _same_question(pair.text_a)
            if hit is not None:
                if hit.entry.alias_of:
                    promoted_hits += 1
                    if _same_question(hit.matched) == _same_question(pair.text_b):  # asked by its very question
                        strict_false += not correct
                        correct = promoted_by[_same_question(hit.matched)] == 1
                    promoted_right += correct
                hits += 1
                right += correct
                if shadow_rate and rng.random() < shadow_rate:
                    cache.learn(candidate, correct)
                    learned += 1
            elif explore:
                cache.learn(candidate, correct)
                explored += 1
            if hit is None and candidate.near_miss:
                judged += 1
                if correct and cache.promote(PARTITION, pair.text_b, candidate.question, np.asarray(vector)):
                    promoted_by[_same_question(pair.text_b)] = pair.label
            threshold = threshold_of()
            if not moves or moves[-1][1] != threshold:
                moves.append((n, threshold))
        if n % step == 0 or n == len(asked):
            curve.append([n, round(hits / n, 4), round(right / hits, 4) if hits else None])
    positives = sum(p.label == 1 for p in pairs)
    requests = len(pairs)  # every text_b is a request; L1's exact hits are no L2 hits
    return {
        "pairs": len(pairs),
        "exact_hits": len(pairs) - len(asked),
        "hits": hits,
        "false_hits": hits - right,
        "precision": right / hits if hits else None,
        "recall": right / positives if positives else 0.0,
        "hit_ratio": hits / requests if requests else 0.0,
        "per_request_error": (hits - right) / requests if requests else 0.0,
        "target_error": cache.learner.max_error,
        "confidence": cache.learner.confidence,
        "shadow_verdicts": learned,
        "explore_verdicts": explored,
        "explored_servable": cache.learner.explored,
        "promote_margin": cache.promote_margin,
        "promotion_judgements": judged,
        "promoted": cache.promotions,
        "promoted_hits": promoted_hits,
        "promoted_false_hits": promoted_hits - promoted_right,
        "promoted_strict_false_hits": strict_false,
        "demoted": cache.demotions,
        "final_threshold": _finite(threshold_of()),
        "certification": cache.learner.explain(POOL if cache.evidence is not None else PARTITION),
        "threshold_moves": [[n, _finite(t)] for n, t in moves[-20:]],
        "curve": curve,
    }


def _finite(threshold: float) -> float | None:
    """A threshold for JSON: None where nothing is served yet (inf)."""
    return None if threshold == float("inf") else round(threshold, 4)
