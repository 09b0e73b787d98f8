"""The learned L2 verifier: P(the cached answer is right for the asked question | what the pair looks like).

It scores the single best verified candidate from features every install has (the cosines, the margin to the next
neighbour with another answer, word and key-term overlap, length, word order and question words) with one
logistic regression pooled over all partitions, numpy only, on standardized features (one scale for the offline
fit, online refits and certification). Starting weights come from `jev cache train-verifier` or the shipped
verifier.json, with calibration verdicts that let a threshold be certified before the first live verdict.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from streams.cache.guards import differences

FEATURES = (
    "bias",
    "cosine",
    "second",
    "margin",
    "overlap",
    "extra_words",
    "extra_key",
    "length_ratio",
    "han",
    "decide",
    "order",
    "all_overlap",
    "asks",
    "decisive",
    "steady",
)
SHIPPED = Path(__file__).with_name("verifier.json")
STORE = "verifier.json"  # in the data dir: weights `jev cache train-verifier` fitted
RIDGE = 1.0  # pull of the starting weights in an online refit, in verdicts' worth
MAX_EXTRA = 10.0  # words only one side has, counted up to this
MIN_SHIFT = 0.01  # the least distance (1 - cosine) a rewording is taken to move a decision's scores by


def features(
    query: str,
    cached: str,
    cosine: float,
    next_cosine: float,
    second: float | None = None,
    decide: bool = False,
    decisive: float = 0.0,
    lead: float = 0.0,
) -> np.ndarray:
    """The feature row of a (question, cached question) pair; `second` is the model check's cosine (the primary
    cosine again where there is none), `next_cosine` the score of the next neighbour (0 for none), `decisive`
    how decisively the cached decision was made (decisiveness(): 0 for a text answer), `lead` by how much its
    choice led the runner-up (lead_of()). `steady` is that lead over how far the rewording moved (1 - cosine): a
    rewording shifts a decision's scores about as far as it moved, so a choice that led by more stays."""
    diff = differences(query, cached)
    han = any("\u4e00" <= c <= "\u9fff" for c in query)
    return np.array(
        [
            1.0,
            cosine,
            cosine if second is None else second,
            cosine - next_cosine,
            diff["overlap"],
            min(diff["extra_words"], MAX_EXTRA) / MAX_EXTRA,
            min(diff["extra_key"], MAX_EXTRA) / MAX_EXTRA,
            diff["length_ratio"],
            float(han),
            float(decide),
            diff["order"],
            diff["all_overlap"],
            diff["asks"],
            decisive,
            math.log1p(lead / max(1 - cosine, MIN_SHIFT)),
        ],
        dtype=np.float64,
    )


def _scores(value) -> list[float]:
    """A cached decision's ranking scores, highest first (none for a text answer)."""
    ranking = value.get("ranking") if isinstance(value, dict) else None
    return sorted((float(r["score"]) for r in ranking or () if isinstance(r, dict) and "score" in r), reverse=True)


def decisiveness(value) -> float:
    """How far the cached decision's choice led: (top score - runner-up) / (top - last) over its ranking, in
    [0, 1] whatever the scorer's scale (0: a tie or no ranking). A rewording keeps a decisive choice; one made
    between close confusers flips often."""
    scores = _scores(value)
    if len(scores) < 2 or scores[0] - scores[-1] <= 1e-12:
        return 0.0
    return (scores[0] - scores[1]) / (scores[0] - scores[-1])


def lead_of(value) -> float:
    """By how much the cached decision's choice led the runner-up, in the scorer's units (0: a tie, no ranking)."""
    scores = _scores(value)
    return max(scores[0] - scores[1], 0.0) if len(scores) >= 2 else 0.0


def fit(x: np.ndarray, y: np.ndarray, prior: np.ndarray, ridge: float = RIDGE, steps: int = 25) -> np.ndarray:
    """Logistic regression by Newton steps, with a ridge pulling the weights towards `prior`."""
    w = prior.astype(np.float64).copy()
    if len(x) == 0:
        return w
    eye = ridge * np.eye(len(w))
    for _ in range(steps):
        p = 1 / (1 + np.exp(-np.clip(x @ w, -30, 30)))
        grad = x.T @ (p - y) + ridge * (w - prior)
        hess = (x * (p * (1 - p))[:, None]).T @ x + eye
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-6:
            break
    return w


def standardizer(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(shift, spread) per column of `rows`: mean and standard deviation; the bias column and a column that does
    not vary keep spread 1 (the bias also shift 0: it stays 1)."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))
    shift = rows.mean(axis=0) if len(rows) else np.zeros(len(FEATURES))
    spread = rows.std(axis=0) if len(rows) else np.ones(len(FEATURES))
    spread = np.where(spread > 1e-9, spread, 1.0)
    shift[0], spread[0] = 0.0, 1.0
    return shift, spread


class Verifier:
    def __init__(
        self,
        weights: np.ndarray,
        name: str = "shipped",
        calibration: tuple[np.ndarray, np.ndarray] | None = None,
        shift: np.ndarray | None = None,
        spread: np.ndarray | None = None,
    ):
        """`weights` on standardized features ((row - shift) / spread; no shift and spread: raw features);
        `calibration`: (raw feature rows, agreed) of verdicts the weights were not fitted on."""
        if len(weights) != len(FEATURES):
            raise ValueError(
                f"verifier weights need {len(FEATURES)} numbers ({', '.join(FEATURES)}), "
                f"got {len(weights)}: refit them with `jev cache train-verifier`"
            )
        self.calibration = (
            calibration if calibration is not None else (np.zeros((0, len(FEATURES))), np.zeros(0, dtype=bool))
        )
        self.shift = np.zeros(len(FEATURES)) if shift is None else np.asarray(shift, dtype=np.float64)
        self.spread = np.ones(len(FEATURES)) if spread is None else np.asarray(spread, dtype=np.float64)
        if self.shift[0] != 0 or self.spread[0] != 1 or (self.spread <= 0).any():
            raise ValueError(
                "the verifier's scale needs shift 0 and spread 1 for the bias and positive spreads: "
                "refit it with `jev cache train-verifier`"
            )
        self.prior = np.asarray(weights, dtype=np.float64)
        self.weights = self.prior.copy()
        self.name = name
        self.fits = 0

    def standardize(self, rows: np.ndarray) -> np.ndarray:
        """Raw feature rows (or one row) on the scale the weights apply to."""
        return (np.asarray(rows, dtype=np.float64) - self.shift) / self.spread

    def probability(self, row: np.ndarray) -> float:
        return 1 / (1 + math.exp(-max(min(float(self.standardize(row) @ self.weights), 30.0), -30.0)))

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-np.clip(self.standardize(rows) @ self.weights, -30.0, 30.0)))

    def refit(self, rows: np.ndarray, agreed: np.ndarray) -> None:
        """Online: the weights that fit these verdicts (raw rows, standardized as the starting weights' were),
        pulled towards the starting weights."""
        self.weights = fit(self.standardize(rows), agreed.astype(np.float64), self.prior)
        self.fits += 1

    def as_dict(self) -> dict:
        return dict(zip(FEATURES, map(float, self.weights)))


def load_verifier(decision: str, data_dir: str | Path) -> Verifier:
    """The weights for `decision` (the embedder, or "minilm+e5" with a model check): trained ones from the data
    dir, else the shipped ones, else cosine alone (a verifier no better than the threshold it replaces). Weights
    saved without a scale apply to raw features."""
    for path, source in ((Path(data_dir) / STORE, "trained"), (SHIPPED, "shipped")):
        if path.exists():
            record = json.loads(path.read_text()).get(decision)
            known = FEATURES[: len(record["weights"])] if record else ()
            if record is not None and set(record["weights"]) == set(known):
                # weights saved before the later FEATURES existed read them with weight 0 (scores unchanged)
                held = record.get("calibration") or {"rows": [], "agreed": []}
                rows = np.array(held["rows"], dtype=np.float64).reshape(-1, len(known))
                rows = np.hstack([rows, np.zeros((len(rows), len(FEATURES) - len(known)))])
                scale = record.get("scale") or {
                    "shift": dict.fromkeys(FEATURES, 0.0),
                    "spread": dict.fromkeys(FEATURES, 1.0),
                }
                shift, spread = (
                    np.array([scale[k].get(f, 0.0 if k == "shift" else 1.0) for f in FEATURES])
                    for k in ("shift", "spread")
                )
                return Verifier(
                    np.array([record["weights"].get(f, 0.0) for f in FEATURES]),
                    f"{source}:{decision}",
                    (rows, np.array(held["agreed"], dtype=bool)),
                    shift,
                    spread,
                )
    cosine_only = np.zeros(len(FEATURES))
    cosine_only[0], cosine_only[1] = -20.0, 25.0  # p = 0.5 at cosine 0.8
    return Verifier(cosine_only, f"cosine:{decision}")


def save_verifier(data_dir: str | Path, decision: str, verifier: Verifier, record: dict) -> Path:
    """Save `verifier`'s starting weights, their scale and its calibration verdicts for `decision` in the data
    dir."""
    path = Path(data_dir) / STORE
    saved = json.loads(path.read_text()) if path.exists() else {}
    rows, agreed = verifier.calibration
    saved[decision] = {
        **record,
        "weights": dict(zip(FEATURES, map(float, verifier.prior))),
        "scale": {
            "shift": dict(zip(FEATURES, map(float, verifier.shift))),
            "spread": dict(zip(FEATURES, map(float, verifier.spread))),
        },
    }
    if len(rows):
        saved[decision]["calibration"] = {"rows": np.round(rows, 4).tolist(), "agreed": [int(a) for a in agreed]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1, sort_keys=True))
    return path
