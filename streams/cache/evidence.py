"""Pooled L2 evidence: every partition's verdicts in one pool, one verifier, one certified threshold.

One learned verifier (verifier.py) turns a candidate into P(correct), and one ThresholdLearner certifies the lowest
probability served from all partitions' verdicts (a threshold per partition needed more verdicts than most ever
got). A score fitted on a verdict cannot also certify it, so verdicts fall by a hash of the pair they judged into a
refit fold and a certifying fold; the verifier's calibration verdicts open the certifying fold and set a floor that
live verdicts only tighten. Decide and generate traffic are certified in pools of their own.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict, deque

import numpy as np

from streams.cache.learning import ThresholdLearner
from streams.cache.verifier import Verifier

POOL = ("pooled",)
CALIBRATION = "offline-calibration"  # the entry key of calibration verdicts (no live entry has it)
FIT_SHARE = 0.25  # verdicts that refit the verifier; the rest certify it
REFIT_EVERY = 100  # fit-fold verdicts between refits (each refit spends a share of alpha)
MAX_ROWS = 10_000  # per fold, the most recent kept
MAX_VETOES = 100_000


def in_fit_fold(key: str, asked: str) -> bool:
    """Does the verdict on entry `key` for the question `asked` refit the verifier (else it certifies)?"""
    digest = hashlib.blake2b(f"{key}\x00{asked}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < FIT_SHARE


class PooledEvidence:
    def __init__(self, verifier: Verifier, learner: ThresholdLearner, refit_every: int = REFIT_EVERY):
        self.verifier = verifier
        self.learner = learner
        self.refit_every = refit_every
        self.fit_rows: deque[tuple[np.ndarray, bool]] = deque(maxlen=MAX_ROWS)
        self.certify_rows: deque[np.ndarray] = deque(maxlen=MAX_ROWS)  # in the learner's order
        self.vetoes: OrderedDict[str, float] = OrderedDict()  # entry key -> cosine of its disagreement
        self.since_refit = 0
        rows, agreed = verifier.calibration
        for row, ok in zip(rows, agreed):
            self.certify_rows.append(row)
            self.learner.observe(POOL, CALIBRATION, self.score(row), bool(ok))
        self.calibration_verdicts = len(rows)

    def score(self, row: np.ndarray) -> float:
        return self.verifier.probability(row)

    def allows(self, key: str, cosine: float, score: float) -> bool:
        """Serve a candidate on entry `key` at this cosine and verifier score? (Exploration may refuse it.)"""
        return not self.vetoed(key, cosine) and self.learner.allows(POOL, key, score)

    def vetoed(self, key: str, cosine: float) -> bool:
        """Entry `key` drew a disagreement at this cosine or above."""
        veto = self.vetoes.get(key)
        return veto is not None and cosine <= veto

    def threshold(self) -> float:
        return self.learner.threshold(POOL)

    def observe(self, key: str, row, cosine: float, agreed: bool, asked: str = "") -> None:
        """A verdict on a candidate of entry `key` with feature `row` at `cosine`, met by the question `asked`."""
        row = np.asarray(row, dtype=np.float64)
        if not agreed:
            self.vetoes[key] = max(self.vetoes.get(key, -math.inf), cosine)
            self.vetoes.move_to_end(key)
            while len(self.vetoes) > MAX_VETOES:
                self.vetoes.popitem(last=False)
        if not in_fit_fold(key, asked):
            self.certify_rows.append(row)
            self.learner.observe(POOL, key, self.score(row), agreed)
            return
        self.fit_rows.append((row, agreed))
        self.since_refit += 1
        if self.since_refit >= self.refit_every:
            self.refit()

    def refit(self) -> None:
        """Refit the verifier on the fit fold and rescore the certifying verdicts (the next threshold is a new
        test)."""
        self.since_refit = 0
        rows = np.stack([r for r, _ in self.fit_rows])
        self.verifier.refit(rows, np.array([a for _, a in self.fit_rows]))
        if self.certify_rows:
            self.learner.rescore(POOL, self.verifier.probabilities(np.stack(self.certify_rows)).tolist())

    def stats(self) -> dict:
        return {
            **self.learner.stats(POOL),
            "fit_verdicts": len(self.fit_rows),
            "calibration_verdicts": self.calibration_verdicts,
            "verifier": self.verifier.name,
            "verifier_fits": self.verifier.fits,
            "weights": self.verifier.as_dict(),
        }
