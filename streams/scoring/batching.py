"""The batch driver: runs the decisions of one micro-batch side by side and makes ONE backend call per tier round
for all of them.

Each decision is a generator (streams.scoring.steps) that yields the backend calls it needs. The driver starts
every decision, groups the calls they wait on by backend, scores each group with one `score_many` call (MiniLM
encodes every context and candidate of the group together; the causal LM pads them into shared forward passes;
vLLM gets them in one generate call) and resumes each decision with its own result. Decisions that need another
tier (fine after coarse, escalation, the next level of a hierarchy) meet again in the next round. Calls are served
in the order of the decisions, so caches see texts in the same order as one decision after another would, and
the tokens metered are the same."""
from __future__ import annotations

from typing import Callable

from streams.backends.protocol import ModelUnavailable, Scored
from streams.scoring.breakers import Fallback
from streams.scoring.steps import Call, Deciding


def score_many(backend, calls: list[Call]) -> list[Scored | ModelUnavailable]:
    """One call for every Call of `calls` when the backend batches, else one call each. A model that could not
    answer gives ModelUnavailable in place of the Scored of each call it failed (all of them when it raised)."""
    items = [(call.context, call.candidates) for call in calls]
    try:
        many = getattr(backend, "score_many", None)
        if many is None:
            return [backend.score(context, candidates) for context, candidates in items]
        if getattr(backend, "takes_deadlines", False):
            return many(items, [call.deadline for call in calls])
        return many(items)
    except ModelUnavailable as exc:
        return [exc] * len(items)


def drive(decisions: list[Deciding], on_error: Callable[[int, Exception], object] | None = None) -> list:
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
        for indices in rounds.values():
            indices.sort()
            backend = calls[indices[0]].backend
            scored = score_many(backend, [calls[i] for i in indices])
            for i, result in zip(indices, scored):
                advance(i, result)
    return results
