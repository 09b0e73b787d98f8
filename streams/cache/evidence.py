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
DECIDE_POOL = ("pooled", "decide")  # decide partitions' verdicts, judged by decisions
DECIDE = ":decide"  # the suffix of the verifier record (verifier.json) the decide pool starts from
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
    def __init__(
        self,
        verifier: Verifier,
        learner: ThresholdLearner,
        refit_every: int = REFIT_EVERY,
        pool: tuple = POOL,
        prior_bounds: bool = False,
    ):
        """`pool`: the learner's partition these verdicts certify (one per request kind: decide traffic is judged
        by decisions, not by paraphrase labels); `prior_bounds`: the threshold the calibration verdicts alone
        certify is a floor that live verdicts can only raise (none certified: live verdicts decide alone)."""
        self.verifier = verifier
        self.learner = learner
        self.refit_every = refit_every
        self.pool = pool
        self.fit_rows: deque[tuple[np.ndarray, bool]] = deque(maxlen=MAX_ROWS)
        self.certify_rows: deque[np.ndarray] = deque(maxlen=MAX_ROWS)  # in the learner's order
        self.vetoes: OrderedDict[str, float] = OrderedDict()  # entry key -> cosine of its disagreement
        self.since_refit = 0
        rows, agreed = verifier.calibration
        for row, ok in zip(rows, agreed):
            self.certify_rows.append(row)
            self.learner.observe(pool, CALIBRATION, self.score(row), bool(ok))
        self.calibration_verdicts = len(rows)
        self.prior_bounds = prior_bounds and len(rows) > 0
        self.prior = self._prior()

    def _prior(self) -> float:
        """The lowest score the calibration verdicts alone certify under the current verifier (a first fit's
        level); -inf where the prior does not bound (off, or nothing certified: then live verdicts decide)."""
        if not self.prior_bounds:
            return -math.inf
        rows, agreed = self.verifier.calibration
        scored = list(zip(self.verifier.probabilities(rows).tolist(), map(bool, agreed)))
        threshold, _ = self.learner._fit(scored, self.learner._level(1))
        return threshold if math.isfinite(threshold) else -math.inf

    def score(self, row: np.ndarray) -> float:
        return self.verifier.probability(row)

    def allows(self, key: str, cosine: float, score: float) -> bool:
        """Serve a candidate on entry `key` at this cosine and verifier score? (Exploration may refuse it.)"""
        return not self.vetoed(key, cosine) and self.learner.allows(self.pool, key, score, self.prior)

    def vetoed(self, key: str, cosine: float) -> bool:
        """Entry `key` drew a disagreement at this cosine or above."""
        veto = self.vetoes.get(key)
        return veto is not None and cosine <= veto

    def threshold(self) -> float:
        return max(self.learner.threshold(self.pool), self.prior)

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
            self.learner.observe(self.pool, key, self.score(row), agreed)
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
            self.learner.rescore(self.pool, self.verifier.probabilities(np.stack(self.certify_rows)).tolist())
        self.prior = self._prior()

    def stats(self) -> dict:
        return {
            **self.learner.stats(self.pool),
            "threshold": self.threshold(),
            "prior_threshold": self.prior if math.isfinite(self.prior) else None,
            "fit_verdicts": len(self.fit_rows),
            "calibration_verdicts": self.calibration_verdicts,
            "verifier": self.verifier.name,
            "verifier_fits": self.verifier.fits,
            "weights": self.verifier.as_dict(),
        }
