"""Pure functions of the cascade: confidence, difficulty, beam width and MMR top-K selection."""

from __future__ import annotations

import math

from streams.models.lexical import words


def softmax(scores: list[float], temperature: float) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp((s - top) / temperature) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def confidence(scores: list[float], temperature: float) -> float:
    """Softmax probability of the best candidate: near 1 when it clearly wins, 1/n when all tie."""
    return round(max(softmax(scores, temperature)), 4) if scores else 0.0


def difficulty(scores: list[float], state_tokens: int) -> float:
    """0 (easy) .. 1 (hard) from cheap features of the coarse pass.

    Scores are standardised first (coarse scores have no fixed scale): a small top-1 margin and a flat
    distribution (high normalised entropy) mean the coarse tier cannot tell the candidates apart; many
    candidates and a long state add a little.
    """
    n = len(scores)
    if n <= 1:
        return 0.0
    mean = sum(scores) / n
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / n)
    if std == 0:
        return 1.0
    z = [(s - mean) / std for s in scores]
    ordered = sorted(z, reverse=True)
    margin = min(1.0, (ordered[0] - ordered[1]) / 2.0)
    probs = softmax(z, 1.0)
    entropy = -sum(p * math.log(p) for p in probs if p > 0) / math.log(n)
    size = min(1.0, n / 50) * 0.5 + min(1.0, state_tokens / 2000) * 0.5
    return round(min(1.0, max(0.0, 0.45 * (1 - margin) + 0.4 * entropy + 0.15 * size)), 4)


def beam_width(hardness: float, k_min: int, k_max: int, n: int) -> int:
    """Candidates the fine tier re-ranks: k_min for easy decisions up to k_max for hard ones."""
    return max(1, min(n, k_min + round(hardness * (k_max - k_min))))


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def mmr_select(scores: list[float], texts: list[str], k: int, relevance_weight: float) -> list[int]:
    """Top-k indices by maximal marginal relevance: relevance (min-max scaled coarse score) minus a
    penalty for word overlap with what is already kept, so near-duplicates do not crowd out the rest."""
    n = len(scores)
    if k >= n:
        return sorted(range(n), key=lambda i: scores[i], reverse=True)
    low, high = min(scores), max(scores)
    rel = [(s - low) / (high - low) if high > low else 1.0 for s in scores]
    bags = [set(words(t)) for t in texts]
    kept: list[int] = []
    rest = set(range(n))
    while len(kept) < k:

        def gain(i: int) -> float:
            overlap = max((jaccard(bags[i], bags[j]) for j in kept), default=0.0)
            return relevance_weight * rel[i] - (1 - relevance_weight) * overlap

        best = max(sorted(rest), key=gain)
        kept.append(best)
        rest.remove(best)
    return kept
