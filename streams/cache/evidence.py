"""Pooled L2 evidence: every partition's verdicts in one pool, one verifier, one certified threshold.

One learned verifier (verifier.py) turns a candidate into P(correct), and one ThresholdLearner certifies the lowest
probability served from all partitions' verdicts (a threshold per partition needed more verdicts than most ever
got). A score fitted on a verdict cannot also certify it, so verdicts fall by a hash of the pair they judged into a
refit fold and a certifying fold; the verifier's calibration verdicts open the certifying fold and set a floor that
live verdicts only tighten. Decide and generate traffic are certified in pools of their own; the decide pool
certifies each language neighbourhood (Han script or not, by the row's `han` feature) apart, so one language's easy
verdicts never certify another's hits.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict, deque

import numpy as np

from streams.cache.learning import ThresholdLearner
from streams.cache.verifier import FEATURES, Verifier

POOL = ("pooled",)
DECIDE_POOL = ("pooled", "decide")  # decide partitions' verdicts, judged by decisions
DECIDE = ":decide"  # the suffix of the verifier record (verifier.json) the decide pool starts from
CALIBRATION = "offline-calibration"  # the entry key of calibration verdicts (no live entry has it)
FIT_SHARE = 0.25  # verdicts that refit the verifier; the rest certify it
REFIT_EVERY = 100  # fit-fold verdicts between refits (each refit spends a share of alpha)
MAX_ROWS = 10_000  # per fold, the most recent kept
MAX_VETOES = 100_000
HAN = FEATURES.index("han")


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
        by_language: bool = False,
    ):
        """`pool`: the learner's partition these verdicts certify (one per request kind: decide traffic is judged
        by decisions, not by paraphrase labels); `prior_bounds`: the threshold the calibration verdicts alone
        certify is a floor that live verdicts can only raise (none certified: live verdicts decide alone);
        `by_language`: each language neighbourhood is certified apart (its own verdicts, prior and threshold)."""
        self.verifier = verifier
        self.learner = learner
        self.refit_every = refit_every
        self.pool = pool
        self.by_language = by_language
        self.fit_rows: deque[tuple[np.ndarray, bool]] = deque(maxlen=MAX_ROWS)
        self.certify_rows: dict[tuple, deque[np.ndarray]] = {}  # per neighbourhood, in the learner's order
        self.vetoes: OrderedDict[str, float] = OrderedDict()  # entry key -> cosine of its disagreement
        self.since_refit = 0
        rows, agreed = verifier.calibration
        for row, ok in zip(rows, agreed):
            self._certify(row, CALIBRATION, bool(ok))
        self.calibration_verdicts = len(rows)
        self.prior_bounds = prior_bounds and len(rows) > 0
        self.prior = self._prior()

    def hood(self, row) -> tuple:
        """The learner partition a feature row is certified in: the pool, or with `by_language` its neighbourhood."""
        return (*self.pool, "han" if row[HAN] else "other") if self.by_language and row is not None else self.pool

    def _certify(self, row: np.ndarray, key: str, agreed: bool) -> None:
        hood = self.hood(row)
        self.certify_rows.setdefault(hood, deque(maxlen=MAX_ROWS)).append(row)
        self.learner.observe(hood, key, self.score(row), agreed)

    def _prior(self) -> dict[tuple, float]:
        """Per neighbourhood, the lowest score its calibration verdicts alone certify under the current verifier (a
        first fit's level); absent where the prior does not bound (off, or nothing certified: live verdicts decide)."""
        if not self.prior_bounds:
            return {}
        rows, agreed = self.verifier.calibration
        scores = self.verifier.probabilities(rows).tolist()
        prior = {}
        for hood in {self.hood(row) for row in rows}:
            scored = [(s, bool(ok)) for s, ok, row in zip(scores, agreed, rows) if self.hood(row) == hood]
            threshold, _ = self.learner._fit(scored, self.learner._level(1))
            if math.isfinite(threshold):
                prior[hood] = threshold
        return prior

    def score(self, row: np.ndarray) -> float:
        return self.verifier.probability(row)

    def allows(self, key: str, cosine: float, score: float, row=None) -> bool:
        """Serve a candidate on entry `key` at this cosine and verifier score, with feature `row`? (Exploration may
        refuse it.)"""
        hood = self.hood(row)
        floor = self.prior.get(hood, -math.inf)
        return not self.vetoed(key, cosine) and self.learner.allows(hood, key, score, floor)

    def vetoed(self, key: str, cosine: float) -> bool:
        """Entry `key` drew a disagreement at this cosine or above."""
        veto = self.vetoes.get(key)
        return veto is not None and cosine <= veto

    def threshold(self, row=None) -> float:
        """The lowest score served to a candidate with feature `row`; without a row, the lowest over the
        neighbourhoods (what the pool serves anywhere)."""
        hoods = [self.hood(row)] if row is not None or not self.by_language else list(self.certify_rows) or [self.pool]
        return min(max(self.learner.threshold(h), self.prior.get(h, -math.inf)) for h in hoods)

    def observe(self, key: str, row, cosine: float, agreed: bool, asked: str = "") -> None:
        """A verdict on a candidate of entry `key` with feature `row` at `cosine`, met by the question `asked`."""
        row = np.asarray(row, dtype=np.float64)
        if not agreed:
            self.vetoes[key] = max(self.vetoes.get(key, -math.inf), cosine)
            self.vetoes.move_to_end(key)
            while len(self.vetoes) > MAX_VETOES:
                self.vetoes.popitem(last=False)
        if not in_fit_fold(key, asked):
            self._certify(row, key, agreed)
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
        for hood, kept in self.certify_rows.items():
            self.learner.rescore(hood, self.verifier.probabilities(np.stack(kept)).tolist())
        self.prior = self._prior()

    def stats(self) -> dict:
        hoods = [self.learner.stats(h) for h in list(self.certify_rows) or [self.pool]]
        return {
            "verdicts": sum(h["verdicts"] for h in hoods),
            "disagreements": sum(h["disagreements"] for h in hoods),
            "threshold": self.threshold(),
            "prior_threshold": min(self.prior.values(), default=None),
            "fit_verdicts": len(self.fit_rows),
            "calibration_verdicts": self.calibration_verdicts,
            "verifier": self.verifier.name,
            "verifier_fits": self.verifier.fits,
            "weights": self.verifier.as_dict(),
        }
