"""L2 lookup latency at N entries on CPU, excluding embedding: exact numpy vs faiss HNSW, side by side.

Random normalized 384-d rows (MiniLM's width, the worst case for HNSW recall), each query a stored row plus noise.
`p99_ms` is SemanticCache.lookup (index, threshold, verification), `verifier_p99_ms` the same with pooled evidence
and the learned verifier on reworded queries; then --churn × the entries are filled anew at the size cap
(`churn_p99_ms`; `evicted_hits` must be 0). Last stdout line: one JSON object.

    .venv/bin/python bench/cache_lookup.py [--entries 100000] [--queries 1000] [--churn 0.4]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import numpy as np
import orjson

from streams.cache.entry import Entry
from streams.cache.evidence import PooledEvidence
from streams.cache.index import VectorIndex
from streams.cache.learning import ThresholdLearner
from streams.cache.semantic import SemanticCache
from streams.cache.verifier import features, load_verifier
from streams.settings import load


class _Precomputed:
    """Stands in for an embedder: the benchmark passes vectors, so embedding is excluded."""

    name, dim = "precomputed", 384

    def embed(self, texts):
        raise AssertionError("the benchmark passes vectors; nothing is embedded")


def _percentiles(latencies: list[float]) -> dict:
    ms = np.array(latencies) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3)}


def _timed_search(index: VectorIndex, queries: np.ndarray, expected: np.ndarray) -> tuple[dict, float]:
    """Latency of top-5 searches and recall@1 (the true neighbour ranked first)."""
    latencies, found = [], 0
    for q, want in zip(queries, expected):
        start = time.perf_counter()
        result = index.search(q, 5)
        latencies.append(time.perf_counter() - start)
        found += bool(result) and result[0][0] == want
    return _percentiles(latencies), float(found) / len(queries)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--exact-queries", type=int, default=200, help="queries timed on the exact index")
    ap.add_argument("--max-exact", type=int, default=10_000, help="exact-index limit of the cache under test")
    ap.add_argument("--churn", type=float, default=0.4, help="new entries filled at the cap, as a fraction of it")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((args.entries, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    picks = rng.choice(args.entries, args.queries, replace=False)
    queries = vectors[picks] + 0.02 * rng.standard_normal((args.queries, 384), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    print(f"exact numpy index, {args.entries} rows", file=sys.stderr)
    exact = VectorIndex(384, max_exact=args.entries)
    exact.add(vectors)
    n = min(args.exact_queries, args.queries)
    exact_lat, _ = _timed_search(exact, queries[:n], picks[:n])

    print("semantic cache (HNSW beyond the exact limit): building", file=sys.stderr)
    cache = SemanticCache(_Precomputed(), threshold=0.8, max_exact=args.max_exact, max_entries=args.entries)
    partition = ("tenant", "decision", "", "latin", "generate:256")
    texts = [f"question number {i} about topic {i % 97}" for i in range(args.entries)]
    start = time.perf_counter()
    cache.insert_many(partition, texts, [Entry(i) for i in range(args.entries)], vectors)
    build_s = time.perf_counter() - start
    index = cache.partitions[partition].index
    print(f"built {index.kind} in {build_s:.1f}s; timing lookups", file=sys.stderr)
    gc.collect()
    gc.freeze()  # the long-lived entries leave the collector's scans, as a serving process does after loading
    latencies, hits = [], 0
    for q, p in zip(queries, picks):
        start = time.perf_counter()
        hit = cache.lookup(partition, texts[p], vector=q)
        latencies.append(time.perf_counter() - start)
        hits += int(hit is not None and hit.value == p)
    index_lat, index_recall = _timed_search(index, queries, picks)
    verifier = _verifier_lookups(cache, partition, texts, queries, picks)
    churn = _churn(cache, partition, rng, int(args.entries * args.churn), vectors, queries, picks)
    print(
        orjson.dumps(
            {
                "entries": args.entries,
                "queries": args.queries,
                "index": index.kind,
                "build_s": round(build_s, 1),
                **_percentiles(latencies),
                "hit_rate": hits / args.queries,
                "index_p50_ms": index_lat["p50_ms"],
                "index_p99_ms": index_lat["p99_ms"],
                "index_recall_at_1": index_recall,
                "exact_p50_ms": exact_lat["p50_ms"],
                "exact_p99_ms": exact_lat["p99_ms"],
                "index_over_exact_p99": round(index_lat["p99_ms"] / exact_lat["p99_ms"], 4),
                **verifier,
                **churn,
            }
        ).decode()
    )


def _verifier_lookups(
    cache: SemanticCache, partition: tuple, texts: list[str], queries: np.ndarray, picks: np.ndarray
) -> dict:
    """Lookups through the learned verifier on the cache's own index (swapped in, then restored)."""
    evidence = PooledEvidence(load_verifier("minilm", load().data_dir), ThresholdLearner(explore=0.0))
    row = features("which question number 1 is about topic 1", texts[1], 0.9, 0.9)
    for i in range(400):
        evidence.observe(f"warm{i}", row, 0.9, True)
    plain, cache.evidence, cache.learner = cache.evidence, evidence, evidence.learner
    latencies, hits = [], 0
    for q, p in zip(queries, picks):
        asked = f"which question number {p} is about topic {p % 97}"
        start = time.perf_counter()
        hit = cache.lookup(partition, asked, vector=q)
        latencies.append(time.perf_counter() - start)
        hits += int(hit is not None and hit.value == p)
    cache.evidence, cache.learner = plain, None
    timed = _percentiles(latencies)
    return {
        "verifier_p50_ms": timed["p50_ms"],
        "verifier_p99_ms": timed["p99_ms"],
        "verifier_hit_rate": hits / len(picks),
        "verifier_weights": evidence.verifier.name,
    }


def _churn(
    cache: SemanticCache, partition: tuple, rng, n: int, vectors: np.ndarray, queries: np.ndarray, picks: np.ndarray
) -> dict:
    """Fill n new entries at the cap one at a time, as a stream does; then look up the queried (recently hit)
    entries, which must survive, and the oldest entries, which must have been evicted."""
    print(f"churn: filling {n} new entries at the cap", file=sys.stderr)
    fresh = rng.standard_normal((n, vectors.shape[1]), dtype=np.float32)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    index = cache.partitions[partition].index
    start, slowest = time.perf_counter(), 0.0
    for i, vector in enumerate(fresh):
        one = time.perf_counter()
        cache.insert(partition, f"new question {i}", -1 - i, vector=vector)
        slowest = max(slowest, time.perf_counter() - one)
    churn_s = time.perf_counter() - start
    index.settle()
    latencies, kept = [], 0
    for q, p in zip(queries, picks):
        start = time.perf_counter()
        hit = cache.lookup(partition, f"question number {p} about topic {p % 97}", vector=q)
        latencies.append(time.perf_counter() - start)
        kept += int(hit is not None and hit.value == p)
    queried = set(picks.tolist())
    evicted = [i for i in range(n) if i not in queried][: len(picks)]
    evicted_hits = sum(bool(hit := cache.lookup(partition, "x", vector=vectors[i])) and hit.value == i for i in evicted)
    return {
        "churn_entries": n,
        "churn_s": round(churn_s, 1),
        "churn_slowest_fill_s": round(slowest, 2),
        "rebuilds": index.rebuilds,
        "size_after": len(cache),
        "index_rows_after": index.size,
        "churn_p99_ms": _percentiles(latencies)["p99_ms"],
        "churn_hit_rate": kept / len(picks),
        "evicted_hits": evicted_hits,
    }


if __name__ == "__main__":
    main()
