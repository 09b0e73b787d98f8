"""L2 thresholds learned from verdicts, so the false-hit rate stays under a target with stated confidence.

Verdicts come from the shadow sample of served hits and from misses whose verified neighbour was refused only for
its score (answered anyway and compared: vCache's exploration), so each is a fair sample of the error at its score.
A partition's threshold is chosen by fixed-sequence testing (Learn-then-Test), from the most conservative down;
the k-th fit tests at level alpha / (k (k + 1)), so the bound holds over every threshold ever served. A partition
with no threshold passing serves no L2 hit; an entry that drew a disagreement at score s is never served again at
a score <= s. The figures behind these choices: docs/architecture.md, "Figures behind the design".
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from statistics import NormalDist

GRID_STEP = 0.0025  # thresholds tested: 1.0, 0.9975, ... down to the exploration floor
GRID_TOP = 1.0
MIN_VERDICTS = 30  # verdicts above a threshold before it is tested, at the least
MAX_VERDICTS = 10_000  # per partition, the most recent kept (traffic drifts)
MAX_PARTITIONS = 10_000
FIRST_TEST_SHARE = 0.1  # the first tested threshold holds at least this share of the verdicts above it
REFIT_FRACTION = 0.1  # refit once the new verdicts pass this share of those kept (each fit spends alpha)
MAX_VETOES = 100_000  # entries with a disagreement remembered, over all partitions
NEAR_BAND = 0.05  # scores this close above the threshold are where a verdict teaches most
NEAR_WEIGHT, FAR_WEIGHT = 2.0, 0.5  # the explore rate, times these, near the threshold and far above it


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (n up to MAX_VERDICTS)."""
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total, log_choose = 0.0, 0.0
    for i in range(k + 1):
        if i:
            log_choose += math.log(n - i + 1) - math.log(i)
        total += math.exp(log_choose + i * log_p + (n - i) * log_q)
    return min(total, 1.0)


def error_bounded(errors: int, n: int, max_error: float, alpha: float) -> bool:
    """Reject "error rate > max_error" at level alpha: the exact binomial tail, or where n * p * (1 - p) >= 25
    (the normal approximation holds) the one-sided Wilson score bound, which costs O(1) instead of O(errors)."""
    if n * max_error * (1 - max_error) < 25:
        return binomial_cdf(errors, n, max_error) <= alpha
    z = NormalDist().inv_cdf(1 - alpha)
    rate = errors / n
    centre = rate + z * z / (2 * n)
    spread = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n) <= max_error


@dataclass
class _Verdicts:
    rows: deque = field(default_factory=lambda: deque(maxlen=MAX_VERDICTS))  # (score, agreed)
    threshold: float = math.inf
    pending: int = 0  # verdicts since the last fit
    fits: int = 0
    level: float = 0.0  # the latest fit's level (0: no fit yet)


class ThresholdLearner:
    def __init__(
        self, max_error: float = 0.05, confidence: float = 0.9, floor: float = 0.0, explore: float = 0.05, seed: int = 0
    ):
        """`floor`: no threshold below it (the guard's tune control); `explore`: the share of servable
        candidates refused to keep verdicts coming above the threshold."""
        if not 0 < max_error < 1:
            raise ValueError(f"max error must be in (0, 1), got {max_error}: set JEV_CACHE_MAX_ERROR")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence}: set JEV_CACHE_ERROR_CONFIDENCE")
        self.max_error = max_error
        self.confidence = confidence
        self.floor = floor
        if not 0 <= explore < 1:
            raise ValueError(f"explore rate must be in [0, 1), got {explore}: set JEV_CACHE_EXPLORE_RATE")
        self.explore = explore
        self.random = random.Random(seed)
        self.explored = 0  # servable candidates refused to learn from
        self.partitions: OrderedDict[tuple, _Verdicts] = OrderedDict()
        self.vetoes: OrderedDict[tuple[tuple, str], float] = OrderedDict()  # (partition, question) -> score

    def observe(self, partition: tuple, question: str, score: float, agreed: bool) -> None:
        """One verdict on a candidate of `partition` whose cached question was `question`, at `score`."""
        part = self.partitions.get(partition)
        if part is None:
            part = self.partitions[partition] = _Verdicts()
            while len(self.partitions) > MAX_PARTITIONS:
                self.partitions.popitem(last=False)
        self.partitions.move_to_end(partition)
        part.rows.append((float(score), bool(agreed)))
        part.pending += 1
        if not agreed:
            key = (partition, question)
            self.vetoes[key] = max(self.vetoes.get(key, -math.inf), float(score))
            self.vetoes.move_to_end(key)
            while len(self.vetoes) > MAX_VETOES:
                self.vetoes.popitem(last=False)

    def rescore(self, partition: tuple, scores: list[float]) -> None:
        """New scores for the verdicts kept, oldest first (the score function was refitted: evidence.py); the
        next `threshold` is a new fit."""
        part = self.partitions.get(partition)
        if part is None or len(scores) != len(part.rows):
            raise ValueError(
                f"rescore needs one score per verdict kept ({len(part.rows) if part else 0}), got {len(scores)}"
            )
        part.rows = deque(((float(s), agreed) for s, (_, agreed) in zip(scores, part.rows)), maxlen=MAX_VERDICTS)
        part.pending = len(part.rows) + 1

    def threshold(self, partition: tuple) -> float:
        """The lowest score served in `partition` (inf: no evidence yet, or none enough)."""
        part = self.partitions.get(partition)
        if part is None:
            return math.inf
        if part.pending > len(part.rows) * REFIT_FRACTION:
            part.level = self._level(part.fits + 1)  # a fit that tests nothing cannot pass by luck: spends nothing
            part.threshold, tested = self._fit(part.rows, part.level)
            part.fits, part.pending = part.fits + tested, 0
        return max(part.threshold, self.floor)

    def allows(self, partition: tuple, question: str, score: float, floor: float = -math.inf) -> bool:
        """Serve a candidate of `partition` matching cached `question` at `score` (never below `floor`)?
        Exploration refuses NEAR_WEIGHT times the explore rate within NEAR_BAND above the threshold, where a
        verdict can move it, and FAR_WEIGHT times it further up: by score only, so verdicts stay fair samples."""
        veto = self.vetoes.get((partition, question))
        threshold = max(self.threshold(partition), floor)
        if score < threshold or (veto is not None and score <= veto):
            return False
        rate = min(self.explore * (NEAR_WEIGHT if score - threshold < NEAR_BAND else FAR_WEIGHT), 0.5)
        if self.explore and self.random.random() < rate:
            self.explored += 1
            return False
        return True

    def _level(self, k: int) -> float:
        """The level of a partition's k-th fit that tests: alpha / (k (k + 1)), summing to alpha over all fits."""
        return (1 - self.confidence) / (k * (k + 1))

    def _fit(self, rows, alpha: float) -> tuple[float, bool]:
        """(the lowest grid threshold passing the fixed-sequence test at level `alpha`, inf for none;
        whether any threshold was tested)."""
        chosen, tested = math.inf, False
        for t, n, errors in self._tests(rows, alpha):
            tested = True
            if not error_bounded(errors, n, self.max_error, alpha):
                break
            chosen = t
        return chosen, tested

    def _tests(self, rows, alpha: float):
        """(threshold, verdicts at or above it, disagreements among them) for each grid threshold with enough
        verdicts to be tested at level `alpha`, from the top down."""
        ordered = sorted(rows, key=lambda r: -r[0])
        least = max(
            MIN_VERDICTS,
            2 * math.ceil(math.log(alpha) / math.log1p(-self.max_error)),
            math.ceil(FIRST_TEST_SHARE * len(ordered)),
        )
        n = errors = 0
        t = GRID_TOP
        while t >= self.floor - 1e-12:
            while n < len(ordered) and ordered[n][0] >= t:
                errors += not ordered[n][1]
                n += 1
            if n >= least:
                yield t, n, errors
            t = round(t - GRID_STEP, 6)

    def explain(self, partition: tuple) -> dict:
        """Why `partition` serves from where it does: at the first threshold its latest fit tests (the
        best-scored `verdicts` of those kept), the `disagreements` among them and the most the test allows there
        (`allowed`, at the fit's `level`). A partition serving nothing holds more than `allowed` there, or has
        too few verdicts to test any threshold (`first_test` None)."""
        self.threshold(partition)  # the latest fit
        part = self.partitions.get(partition)
        rows = list(part.rows) if part else []
        level = part.level if part and part.level else self._level(1)  # no fit yet: a first one's
        first = next(self._tests(rows, level), None)
        if first is not None:
            t, n, errors = first
            allowed = -1
            while allowed + 1 <= n and error_bounded(allowed + 1, n, self.max_error, level):
                allowed += 1
            first = {"score": t, "verdicts": n, "disagreements": errors, "allowed": allowed}
        return {
            "verdicts": len(rows),
            "disagreements": sum(not r[1] for r in rows),
            "level": level,
            "first_test": first,
        }

    def stats(self, partition: tuple) -> dict:
        part = self.partitions.get(partition)
        rows = list(part.rows) if part else []
        return {
            "verdicts": len(rows),
            "disagreements": sum(not r[1] for r in rows),
            "threshold": self.threshold(partition),
        }
