"""The learned L2 verifier: P(the cached answer is right for the asked question | what the pair looks like).

It scores the single best candidate a question meets in L2 (the nearest cached question that passed the
verification checks, verify.py) from features every install has: the primary embedder's cosine, the model
check's cosine where one is configured (multilingual e5), how far the next neighbour with another answer lies
behind (a crowded neighbourhood is ambiguous), the overlap of the two questions' word units, the words and key terms only
one side has, the length ratio, two offsets shared by all partitions (Han text; a decide request), and
word order, function words and question words (verify.differences: "Why did X win?" is not "Did X win?").
One logistic regression over all partitions (pooled: a partition with few verdicts borrows the others'),
numpy only. Its starting weights are those `jev cache train-verifier` fitted offline on labelled pairs
(saved in the data dir), else the shipped ones (verifier.json, fitted the same way on the development
part of qqp-dev); online it is refitted from verdicts (evidence.py), pulled towards the starting weights.

Weights come with calibration verdicts: `train-verifier` fits on one part of the labelled pairs and keeps the
feature rows and outcomes of the candidates mined from the other part, which the fit never saw. They are
verdicts like live ones (exchangeable with traffic like those pairs), so they join the certifying fold and the
threshold can be certified before the first live verdict; live verdicts join the same test and, being newer,
push them out of its window (learning.MAX_VERDICTS).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from streams.cache.verify import differences

FEATURES = ("bias", "cosine", "second", "margin", "overlap", "extra_words", "extra_key", "length_ratio", "han",
            "decide", "order", "all_overlap", "asks")
SHIPPED = Path(__file__).with_name("verifier.json")
STORE = "verifier.json"  # in the data dir: weights `jev cache train-verifier` fitted
RIDGE = 1.0  # pull of the starting weights in an online refit, in verdicts' worth
MAX_EXTRA = 10.0  # words only one side has, counted up to this


def features(query: str, cached: str, cosine: float, next_cosine: float, second: float | None = None,
             decide: bool = False) -> np.ndarray:
    """The feature row of a (question, cached question) pair; `second` is the model check's cosine (0 where there
    is none: a copy of the primary cosine would only split its weight), `next_cosine` the score of the next
    neighbour (0 for none)."""
    diff = differences(query, cached)
    han = any("\u4e00" <= c <= "\u9fff" for c in query)
    return np.array([1.0, cosine, 0.0 if second is None else second, cosine - next_cosine, diff["overlap"],
                     min(diff["extra_words"], MAX_EXTRA) / MAX_EXTRA, min(diff["extra_key"], MAX_EXTRA) / MAX_EXTRA,
                     diff["length_ratio"], float(han), float(decide), diff["order"], diff["all_overlap"],
                     diff["asks"]], dtype=np.float64)


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


class Verifier:
    def __init__(self, weights: np.ndarray, name: str = "shipped",
                 calibration: tuple[np.ndarray, np.ndarray] | None = None):
        """`calibration`: (feature rows, agreed) of verdicts the weights were not fitted on."""
        if len(weights) != len(FEATURES):
            raise ValueError(f"verifier weights need {len(FEATURES)} numbers ({', '.join(FEATURES)}), "
                             f"got {len(weights)}: refit them with `jev cache train-verifier`")
        self.calibration = calibration if calibration is not None else (np.zeros((0, len(FEATURES))),
                                                                         np.zeros(0, dtype=bool))
        self.prior = np.asarray(weights, dtype=np.float64)
        self.weights = self.prior.copy()
        self.name = name
        self.fits = 0

    def probability(self, row: np.ndarray) -> float:
        return 1 / (1 + math.exp(-max(min(float(row @ self.weights), 30.0), -30.0)))

    def refit(self, rows: np.ndarray, agreed: np.ndarray) -> None:
        """Online: the weights that fit these verdicts, pulled towards the starting weights."""
        self.weights = fit(rows, agreed.astype(np.float64), self.prior)
        self.fits += 1

    def as_dict(self) -> dict:
        return dict(zip(FEATURES, map(float, self.weights)))


def load_verifier(decision: str, data_dir: str | Path) -> Verifier:
    """The weights for `decision` (the embedder, or "minilm+e5" with a model check): trained ones from the data
    dir, else the shipped ones, else cosine alone (a verifier no better than the threshold it replaces)."""
    for path, source in ((Path(data_dir) / STORE, "trained"), (SHIPPED, "shipped")):
        if path.exists():
            record = json.loads(path.read_text()).get(decision)
            if record is not None and set(record["weights"]) == set(FEATURES):
                held = record.get("calibration") or {"rows": [], "agreed": []}
                rows = np.array(held["rows"], dtype=np.float64).reshape(-1, len(FEATURES))
                return Verifier(np.array([record["weights"][f] for f in FEATURES]), f"{source}:{decision}",
                                (rows, np.array(held["agreed"], dtype=bool)))
    cosine_only = np.zeros(len(FEATURES))
    cosine_only[0], cosine_only[1] = -20.0, 25.0  # p = 0.5 at cosine 0.8
    return Verifier(cosine_only, f"cosine:{decision}")


def save_weights(data_dir: str | Path, decision: str, weights: np.ndarray, record: dict,
                 calibration: tuple[np.ndarray, np.ndarray] | None = None) -> Path:
    """Save `weights` (and the calibration verdicts kept out of their fit) for `decision` in the data dir."""
    path = Path(data_dir) / STORE
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[decision] = {**record, "weights": dict(zip(FEATURES, map(float, weights)))}
    if calibration is not None:
        rows, agreed = calibration
        saved[decision]["calibration"] = {"rows": np.round(rows, 4).tolist(), "agreed": [int(a) for a in agreed]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1, sort_keys=True))
    return path
