"""Nearest-neighbour index over normalized vectors: exact numpy up to `max_exact` rows, faiss HNSW beyond.

Scores are inner products. HNSW cannot delete, so a removed row is a tombstone that searches skip, and past
REBUILD_FRACTION of tombstones the index is rebuilt from the live rows on a background thread while the old one
keeps serving, so memory stays bounded by the live size. Searches run with one OpenMP thread (a team waits at its
barrier on shared cores; docs/architecture.md has the measurement), builds with all the process may use.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

REBUILD_FRACTION = 0.25
CATCH_UP = 256  # rows added during a rebuild that the swap adds in place; more go through another round
_REBUILDER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hnsw-rebuild")


class VectorIndex:
    def __init__(
        self, dim: int, max_exact: int = 10_000, hnsw_m: int = 16, ef_construction: int = 40, ef_search: int = 64
    ):
        self.dim = dim
        self.max_exact = max_exact
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.next_id = 0
        self.rebuilds = 0
        self.building: tuple[int, np.ndarray, Future] | None = None  # rows snapshotted, their ids, the new index
        self._reset()

    def _reset(self) -> None:
        self.rows = np.zeros((16, self.dim), dtype=np.float32)  # exact index only
        self.ids = np.zeros(16, dtype=np.int64)  # row -> id
        self.row_of: dict[int, int] = {}  # id -> row, live rows only
        self.size = 0  # rows in use, tombstones included
        self.dead: set[int] = set()  # HNSW rows removed
        self.hnsw: Any = None  # a faiss HNSW index (untyped) once the rows outgrow the exact index

    @property
    def kind(self) -> str:
        return "hnsw" if self.hnsw is not None else "exact"

    def add(self, vectors: np.ndarray) -> range:
        """Add rows; returns their ids."""
        self._swap_if_built()
        vectors = np.ascontiguousarray(np.atleast_2d(vectors), dtype=np.float32)
        ids = range(self.next_id, self.next_id + len(vectors))
        self.next_id += len(vectors)
        self._append(vectors, np.arange(ids.start, ids.stop, dtype=np.int64))
        if self.hnsw is None and self.size > self.max_exact:
            self._to_hnsw()
        return ids

    def _append(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        end = self.size + len(vectors)
        if end > len(self.ids):
            grown = max(end, 2 * len(self.ids))
            self.ids = np.concatenate([self.ids, np.zeros(grown - len(self.ids), dtype=np.int64)])
            if self.hnsw is None:
                self.rows = np.concatenate([self.rows, np.zeros((grown - len(self.rows), self.dim), np.float32)])
        if self.hnsw is not None:
            self.hnsw.add(vectors)
        else:
            self.rows[self.size : end] = vectors
        self.ids[self.size : end] = ids
        self.row_of.update(zip(ids.tolist(), range(self.size, end)))
        self.size = end

    def remove(self, id_: int) -> None:
        self._swap_if_built()
        row = self.row_of.pop(id_)
        if self.hnsw is not None:
            self.dead.add(row)
            if len(self.dead) > REBUILD_FRACTION * self.size and self.building is None:
                self._rebuild()
            return
        last = self.size - 1
        if row != last:
            self.rows[row] = self.rows[last]
            self.ids[row] = self.ids[last]
            self.row_of[int(self.ids[row])] = row
        self.size = last

    def _rebuild(self) -> None:
        """The live rows: exact again at once if they fit, else a new HNSW built in the background."""
        live = np.ones(self.size, dtype=bool)
        live[list(self.dead)] = False
        vectors, ids = self.hnsw.reconstruct_n(0, self.size)[live], self.ids[: self.size][live]
        if len(ids) > self.max_exact:
            self.building = (self.size, ids, _REBUILDER.submit(self._new_hnsw, vectors))
            return
        self._reset()
        self._append(vectors, ids)
        self.rebuilds += 1

    def _swap_if_built(self, wait: bool = False) -> None:
        """Swap in a finished rebuild, adding the rows added since its snapshot and tombstoning the removed.
        Many added rows are first added to the new index in the background too (a catch-up round)."""
        if self.building is None or not (wait or self.building[2].done()):
            return
        snapshot, ids, future = self.building
        index, added = future.result(), self.size - snapshot
        ids = np.concatenate([ids, self.ids[snapshot : self.size]])
        vectors = self.hnsw.reconstruct_n(snapshot, added) if added else np.empty((0, self.dim), dtype=np.float32)
        if added > CATCH_UP and not wait:
            self.building = (self.size, ids, _REBUILDER.submit(_extended, index, vectors))
            return
        if added:
            index.add(vectors)
        self.hnsw, self.ids, self.size, self.building = index, ids, len(ids), None
        live = self.row_of
        self.row_of, self.dead = {}, set()
        for row, id_ in enumerate(ids.tolist()):
            if id_ in live:
                self.row_of[id_] = row
            else:
                self.dead.add(row)
        self.rebuilds += 1

    def settle(self) -> None:
        """Wait for a rebuild in progress and swap it in (tests, benchmarks, shutdown)."""
        self._swap_if_built(wait=True)

    def _to_hnsw(self) -> None:
        self.hnsw, self.rows = self._new_hnsw(self.rows[: self.size]), np.zeros((0, self.dim), dtype=np.float32)

    def _new_hnsw(self, vectors: np.ndarray):
        try:
            import faiss
        except ImportError as e:
            raise RuntimeError(
                f"more than {self.max_exact} entries in one partition need faiss-cpu: "
                f"pip install 'jev[ann]', or raise the exact-index limit ({e})"
            ) from e
        index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        index.hnsw.efSearch = self.ef_search
        faiss.omp_set_num_threads(len(os.sched_getaffinity(0)))
        try:
            index.add(vectors)
        finally:
            faiss.omp_set_num_threads(1)  # this thread's searches
        return index

    def search(self, vector: np.ndarray, k: int = 1) -> list[tuple[int, float]]:
        """The k nearest live rows as (id, score), best first (fewer if tombstones crowd out the rest)."""
        self._swap_if_built()
        if not self.row_of:
            return []
        k = min(k, len(self.row_of))
        query = np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1)
        if self.hnsw is not None:
            import faiss

            faiss.omp_set_num_threads(1)  # per thread: the first search of a thread that built none
            fetch = min(self.size, 2 * k if self.dead else k)
            scores, rows = self.hnsw.search(query, fetch)
            found = [(int(r), float(s)) for r, s in zip(rows[0], scores[0]) if r >= 0 and r not in self.dead]
            return [(int(self.ids[r]), s) for r, s in found[:k]]
        scores = self.rows[: self.size] @ query[0]
        top = np.argpartition(-scores, k - 1)[:k] if k < self.size else np.arange(self.size)
        top = top[np.argsort(-scores[top])]
        return [(int(self.ids[r]), float(scores[r])) for r in top]

    def __len__(self) -> int:
        return len(self.row_of)


def _extended(index, vectors: np.ndarray):
    index.add(vectors)
    return index
