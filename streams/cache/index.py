"""Nearest-neighbour index over normalized vectors: exact numpy up to `max_exact` rows, faiss HNSW beyond.

Scores are inner products (cosines for normalized rows). Row ids are positions in insertion order.
"""
from __future__ import annotations

import numpy as np


class VectorIndex:
    def __init__(self, dim: int, max_exact: int = 10_000, hnsw_m: int = 16, ef_construction: int = 40,
                 ef_search: int = 64):
        self.dim = dim
        self.max_exact = max_exact
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.rows = np.zeros((16, dim), dtype=np.float32)
        self.size = 0
        self.hnsw = None

    @property
    def kind(self) -> str:
        return "hnsw" if self.hnsw is not None else "exact"

    def add(self, vectors: np.ndarray) -> range:
        vectors = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        start = self.size
        if self.hnsw is not None:
            self.hnsw.add(vectors)
        else:
            while self.size + len(vectors) > len(self.rows):
                self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
            self.rows[self.size:self.size + len(vectors)] = vectors
        self.size += len(vectors)
        if self.hnsw is None and self.size > self.max_exact:
            self._to_hnsw()
        return range(start, self.size)

    def _to_hnsw(self) -> None:
        try:
            import faiss
        except ImportError as e:
            raise RuntimeError(f"more than {self.max_exact} entries in one partition need faiss-cpu: "
                               f"pip install 'jev[ann]', or raise the exact-index limit ({e})") from e
        index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        index.hnsw.efSearch = self.ef_search
        index.add(self.rows[:self.size])
        self.hnsw, self.rows = index, np.zeros((0, self.dim), dtype=np.float32)

    def search(self, vector: np.ndarray, k: int = 1) -> list[tuple[int, float]]:
        """The k nearest rows as (row id, score), best first."""
        if self.size == 0:
            return []
        k = min(k, self.size)
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if self.hnsw is not None:
            scores, ids = self.hnsw.search(query, k)
            return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]
        scores = self.rows[:self.size] @ query[0]
        top = np.argpartition(-scores, k - 1)[:k] if k < self.size else np.arange(self.size)
        top = top[np.argsort(-scores[top])]
        return [(int(i), float(scores[i])) for i in top]

    def __len__(self) -> int:
        return self.size
