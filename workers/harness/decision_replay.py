"""Replay decision requests through the live L2 logic, judging every hit by the decision it serves.

The cache is a CacheStage built from the settings, as a stage process builds it (its embedder, verifier,
certified pools, learner and exploration), with a plain dict as its L1 table. Requests are asked in file order:
- an L1 hit (the very same request again) is counted apart (`exact_hits`) and asks nothing more;
- every other request is decided by the naive path (streams/shadow/naive.py: the top tier over every
  candidate, no rules, no cache), which is both what a miss is answered with and the truth a hit is judged by;
- an L2 hit is right when its cached decision agrees with the naive decision for the new request
  (semantic.answers_agree: the same action); a share `shadow_rate` of the hits hand their verdict to the
  cache (CacheStage.learn, the shadow sample), as live;
- a miss fills the cache with its naive decision through CacheStage.fill, which also compares it with the
  candidate the miss was refused (the exploration verdict), as live.
`tokens_saved` is what the naive path spent on the requests L2 answered (input and output tokens).
`agreement_lower` is the one-sided 95% Wilson lower bound of the agreement over served hits.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable, Iterable

import numpy as np
import orjson

from schemas.records import Request, Work
from streams.cache.evidence import DECIDE, DECIDE_POOL, PooledEvidence
from streams.cache.exact import cache_key
from streams.cache.learning import ThresholdLearner
from streams.cache.modelcheck import check_name, decision_name
from streams.cache.semantic import answers_agree
from streams.cache.stage import CacheStage
from streams.cache.training import BOUNDS, CALIBRATION_SHARE, fit_rows
from streams.cache.verifier import FEATURES, Verifier
from streams.core.switches import SWITCHES
from streams.scoring.factory import work_for
from streams.shadow.naive import decide_naive

REQUEST_FIELDS = frozenset(Request.__annotations__)
Z95 = 1.6448536269514722  # one-sided 95%
BATCH = 64  # requests decided or embedded at once


def wilson_lower(agreed: int, n: int, z: float = Z95) -> float | None:
    """The one-sided Wilson score lower bound of a proportion (None without observations)."""
    if n == 0:
        return None
    p = agreed / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)


def read_requests(path: str) -> list[Request]:
    """Request records of a JSONL file, in order; fields a Request does not have (a pair label) are ignored."""
    requests = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                body = orjson.loads(line)
                requests.append(Request.from_data({k: v for k, v in body.items() if k in REQUEST_FIELDS}))
            except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as e:
                raise ValueError(f"{path} line {n} is not a request record ({e}): fix or remove that line") from None
    if not requests:
        raise ValueError(f"{path} holds no request records: write one JSON request per line")
    return requests


def replay_decisions(
    stage: CacheStage,
    naive,
    requests: list[Request],
    model: str,
    shadow_rate: float,
    seed: int = 0,
    progress: Callable[[Iterable], Iterable] = iter,
    collect: list | None = None,
) -> dict:
    """The summary of the replay (module doc); `stage` fresh, `naive` a naive engine (naive_engine). `collect`
    gets (feature row, agreed) for every L2 candidate met, served or not: what train-verifier fits on."""
    if stage.semantic is None:
        raise ValueError("L2 is off (JEV_CACHE_EMBEDDER=none): set an embedder to replay decisions through it")
    if not 0 <= shadow_rate <= 1:
        raise ValueError(f"shadow rate must be in [0, 1], got {shadow_rate}")
    switches = dict.fromkeys(SWITCHES, True)
    rng = random.Random(seed)
    naive_decisions = _decide_all(naive, requests, model, progress)  # neither depends on the cache's state
    vectors = _embed_all(stage, requests, model)
    hits = wrong = exact = saved = sampled = 0
    first_hit_at = None
    wrong_at: list[int] = []
    for i, request in enumerate(requests):
        work = _work(request, model)
        if stage.lookup_exact(work, switches) is not None:
            exact += 1
            continue
        hit = None
        if stage.wants_semantic(work, switches):
            hit = stage.lookup_semantic(work, vectors[i])
        decision = naive_decisions[i]
        if collect is not None and work.cache_match and work.cache_match.get("features"):
            match = work.cache_match
            cached = stage.semantic.value_of(tuple(match["partition"]), match["question"])
            if cached is not None:
                collect.append((match["features"], answers_agree(cached, decision.to_representation())))
        if hit is None:
            stage.fill(work, decision, switches)
            continue
        hits += 1
        first_hit_at = i if first_hit_at is None else first_hit_at
        agreed = answers_agree(hit.value, decision.to_representation())
        if not agreed:
            wrong += 1
            wrong_at.append(i)
        saved += decision.input_tokens + decision.output_tokens
        if shadow_rate and rng.random() < shadow_rate:
            stage.learn(work, agreed)
            sampled += 1
    n = len(requests)
    decide = stage.semantic.decide_evidence
    return {
        "requests": n,
        "hits": hits,
        "wrong_hits": wrong,
        "hit_ratio": hits / n,
        "agreement": (hits - wrong) / hits if hits else None,
        "agreement_lower": wilson_lower(hits - wrong, hits),
        "first_hit_at": first_hit_at,
        "tokens_saved": saved,
        "exact_hits": exact,
        "shadow_verdicts": sampled,
        "wrong_hit_at": wrong_at[:20],
        "threshold": _finite(decide.threshold()) if decide is not None else None,
        "prior_thresholds": {h[-1]: _finite(t) for h, t in decide.prior.items()} if decide is not None else {},
        "verifier": decide.verifier.name if decide is not None else None,
        "explored_servable": stage.semantic.learner.explored if stage.semantic.learner is not None else 0,
        "refusals": dict(stage.semantic.refusals),
    }


def _decide_all(naive, requests: list[Request], model: str, progress) -> list:
    """The naive decision of every request, decided in batches as a scoring worker decides."""
    out: list = []
    for start in progress(range(0, len(requests), BATCH)):
        works, _ = decide_naive(naive, [_work(r, model) for r in requests[start : start + BATCH]])
        out.extend(w.decision for w in works)
    return out


def _embed_all(stage: CacheStage, requests: list[Request], model: str) -> list:
    """The L2 vector of every request's question (None where L2 does not match it), in batches."""
    works = [_work(r, model) for r in requests]
    asks = [i for i, w in enumerate(works) if stage.wants_semantic(w, dict.fromkeys(SWITCHES, True))]
    vectors: list = [None] * len(works)
    for start in range(0, len(asks), BATCH):
        chunk = asks[start : start + BATCH]
        for i, vector in zip(chunk, stage.embed([works[i] for i in chunk])):
            vectors[i] = vector
    return vectors


def _work(request: Request, model: str) -> Work:
    work = work_for(request, model)
    work.cache_key = cache_key(work)
    return work


def _finite(value: float) -> float | None:
    return round(value, 4) if math.isfinite(value) else None


def replay_file(settings, path: str, shadow_rate: float, seed: int = 0, progress=lambda n: iter) -> dict:
    """Replay the requests of `path` through a CacheStage and a naive engine built from `settings`."""
    from streams.scoring.factory import build_engine
    from streams.shadow.naive import naive_engine

    requests = read_requests(path)
    stage = CacheStage({}, settings)
    naive = naive_engine(build_engine(settings))
    summary = replay_decisions(
        stage, naive, requests, settings.default_model, shadow_rate, seed, progress(-(-len(requests) // BATCH))
    )
    return {**summary, "embedder": stage.semantic.embedder.name, "max_error": settings.cache_max_error}


def train_decisions(settings, path: str, progress=lambda n: iter) -> tuple[str, Verifier, dict]:
    """(the record name, the decide pool's verifier, a summary) fitted on the L2 candidates met replaying `path`
    with nothing served: rows of entries hashed into training.CALIBRATION_SHARE are its calibration verdicts."""
    from streams.scoring.factory import build_engine
    from streams.shadow.naive import naive_engine

    requests = read_requests(path)
    stage = CacheStage({}, settings)
    if stage.semantic is None:
        raise ValueError("L2 is off (JEV_CACHE_EMBEDDER=none): set an embedder to train its verifier")
    never = PooledEvidence(Verifier(np.zeros(len(FEATURES))), ThresholdLearner(explore=0.0), pool=DECIDE_POOL)
    stage.semantic.evidence = stage.semantic.decide_evidence = never
    rows: list = []
    naive = naive_engine(build_engine(settings))
    replay_decisions(stage, naive, requests, settings.default_model, 0.0, 0, progress(-(-len(requests) // BATCH)), rows)
    held = np.array([_held(row) for row, _ in rows], dtype=bool)
    x = np.array([row for row, _ in rows], dtype=np.float64).reshape(-1, len(FEATURES))
    y = np.array([ok for _, ok in rows], dtype=np.float64)
    verifier, summary = fit_rows(
        x[~held],
        y[~held],
        x[held],
        y[held],
        confidence=settings.cache_error_confidence,
        bounds=(settings.cache_max_error, *BOUNDS),
    )
    embedder = stage.semantic.embedder.name
    return (
        decision_name(embedder, check_name(settings.cache_model_check, embedder)) + DECIDE,
        verifier,
        {"requests": len(requests), **summary},
    )


def _held(row) -> bool:
    """Calibration or fit, by a hash of the feature row (never its outcome)."""
    digest = hashlib.blake2b(np.asarray(row, dtype=np.float64).round(6).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64 < CALIBRATION_SHARE
