"""The batch driver: runs the decisions of one micro-batch side by side and makes ONE backend call per tier round
for all of them.

Each decision is a generator of backend calls (streams.scoring.steps); the driver groups the calls by backend,
scores each group with one `score_many` call and resumes each decision with its own result, in order, so caches
and metered tokens are as for one decision after another. Inside a round the shortest call goes first (`Pace`), so
a decision's time budget is not spent waiting on another backend's long call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from streams.models.protocol import ModelUnavailable, Scored
from streams.scoring.breakers import Fallback
from streams.scoring.steps import Call, Deciding


def score_many(backend, calls: list[Call]) -> list[Scored | ModelUnavailable]:
    """One call for every Call of `calls` when the backend batches (`batches`, True unless it says otherwise),
    else one call each. A model that could not answer gives ModelUnavailable in place of the Scored of each call
    it failed (all of them when it raised)."""
    items = [(call.context, call.candidates) for call in calls]
    try:
        many = backend.score_many if batches(backend) else None
        if many is None:
            return [backend.score(context, candidates) for context, candidates in items]
        if getattr(backend, "takes_deadlines", False):
            return many(items, [call.deadline for call in calls])
        return many(items)
    except ModelUnavailable as exc:
        return [exc] * len(items)


def batches(backend) -> bool:
    """Whether the worker scores a micro-batch's calls to `backend` in one `score_many` call: a backend with
    `score_many` does unless it sets `batches = False` (where batching was measured to cost, bench/batching.py)."""
    return hasattr(backend, "score_many") and getattr(backend, "batches", True)


class Pace:
    """Each backend's seconds per text, measured on its calls (a moving average); a backend not yet measured
    counts as free, so it goes first once and is measured."""

    def __init__(self, weight: float = 0.3):
        self.weight = weight
        self.seconds_per_text: dict[tuple[str, str], float] = {}

    @staticmethod
    def key(backend) -> tuple[str, str]:
        return backend.name, backend.model

    def expected(self, backend, calls: list[Call]) -> float:
        return self.seconds_per_text.get(self.key(backend), 0.0) * texts_of(calls)

    def observe(self, backend, calls: list[Call], seconds: float) -> None:
        rate, key = seconds / max(1, texts_of(calls)), self.key(backend)
        known = self.seconds_per_text.get(key)
        self.seconds_per_text[key] = rate if known is None else known + self.weight * (rate - known)


def texts_of(calls: list[Call]) -> int:
    return sum(1 + len(call.candidates) for call in calls)


PACE = Pace()  # the process's: its backends are the process's models


def drive(decisions: list[Deciding[Any]], on_error: Callable[[int, Exception], object] | None = None) -> list:
    """Run `decisions` to completion, batching their calls; their return values in order. A decision that raises
    gets `on_error(index, exc)` as its result (re-raised when on_error is None)."""
    results: list = [None] * len(decisions)
    waiting: dict[int, Call] = {}

    def advance(i: int, value) -> None:
        try:
            if isinstance(value, ModelUnavailable):  # the decision falls back, as when a breaker trips
                waiting[i] = decisions[i].throw(Fallback(value.reason))
            else:
                waiting[i] = decisions[i].send(value)
        except StopIteration as done:
            results[i] = done.value
        except Exception as exc:
            if on_error is None:
                raise
            results[i] = on_error(i, exc)

    for i in range(len(decisions)):
        advance(i, None)
    while waiting:
        rounds: dict[int, list[int]] = {}
        for i, call in waiting.items():
            rounds.setdefault(id(call.backend), []).append(i)
        calls, waiting = waiting, {}
        groups = [sorted(indices) for indices in rounds.values()]
        for indices in sorted(groups, key=lambda ix: PACE.expected(calls[ix[0]].backend, [calls[i] for i in ix])):
            backend, group = calls[indices[0]].backend, [calls[i] for i in indices]
            began = time.perf_counter()
            scored = score_many(backend, group)
            PACE.observe(backend, group, time.perf_counter() - began)
            for i, result in zip(indices, scored):
                advance(i, result)
    return results
