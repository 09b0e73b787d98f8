"""Served against naive: the verdict of one sampled request, and the join that pairs the two decisions.

Both halves of a pair reach the postprocess step of the stage process that owns the request's cache
partition (the served decision from ingest, the cache agent or the scoring workers; the naive one from the
scoring workers), in either order; the join holds the first until the second arrives, at most `capacity`
pending pairs (the oldest dropped: a twin dropped under load never arrives).
"""

from __future__ import annotations

import re
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import Any

from schemas.records import Decision, Verdict, Work
from streams.shadow import mechanisms

WORD = re.compile(r"\w+")


def text_similarity(a: str, b: str) -> float:
    """Token-overlap F1 of two answers (case-folded words): 1.0 for the same words, 0.0 for none shared."""
    wa, wb = Counter(WORD.findall(a.lower())), Counter(WORD.findall(b.lower()))
    if not wa and not wb:
        return 1.0
    common = sum((wa & wb).values())
    if not common:
        return 0.0
    precision, recall = common / sum(wa.values()), common / sum(wb.values())
    return 2 * precision * recall / (precision + recall)


def same_answer(req, action_id: str | None, text: str | None, naive: Decision, text_agree: float) -> tuple[bool, float]:
    """(agreed, similarity) of an answer to request `req` with the naive one: a decide request agrees on the
    action id; a generate request when the answers' similarity reaches `text_agree`."""
    if req.kind == "generate" or not req.candidates:
        similarity = text_similarity(text or "", naive.text or "")
        return similarity >= text_agree, similarity
    agreed = bool(action_id) and action_id == naive.action_id
    return agreed, 1.0 if agreed else 0.0


def judge(served: Work, naive: Decision, acted: list[str], text_agree: float, now: float | None = None) -> Verdict:
    """The verdict: decide requests agree on the action id; generate requests when their answers' similarity
    reaches `text_agree`. Where the request is labelled (human_decision), `kept` compares accuracy instead."""
    req, decision = served.request, served.decided()
    agreed, similarity = same_answer(req, decision.action_id, decision.text, naive, text_agree)
    label = req.human_decision if req.candidates else ""
    served_correct, naive_correct = decision.action_id == label, naive.action_id == label
    kept = (served_correct or not naive_correct) if label else agreed
    return Verdict(
        request_id=req.request_id,
        ts=time.time() if now is None else now,
        tenant=req.tenant,
        service=req.service,
        decision_type=req.decision_type,
        kind=req.kind,
        mechanisms=acted,
        agreed=agreed,
        kept=kept,
        similarity=round(similarity, 4),
        served_tier=decision.tier,
        naive_tier=naive.tier,
        served_action=decision.action_id,
        naive_action=naive.action_id,
        labelled=bool(label),
        served_correct=bool(label) and served_correct,
        naive_correct=bool(label) and naive_correct,
        served_tokens=decision.input_tokens + decision.output_tokens,
        naive_tokens=naive.input_tokens + naive.output_tokens,
        nominal_tokens=decision.nominal_tokens,
    )


class ShadowJoin:
    """Pairs served and naive decisions by (tenant, request id) into Verdicts (two tenants' ids never meet).
    `learn(work, agreed)`, when given, hears the verdict of every request the L2 cache answered (the cache stage
    learns its thresholds from them)."""

    def __init__(self, text_agree: float, learn=None, capacity: int = 10_000):
        self.text_agree, self.learn, self.capacity = text_agree, learn, capacity
        # (side, the served Work or the naive Decision, the mechanisms that acted) of the first half to arrive
        self.pending: OrderedDict[tuple[str, str], tuple[str, Any, list[str]]] = OrderedDict()
        self.expired = 0

    def served(self, work: Work, usage: list) -> Verdict | None:
        """A finished served Work (its decision as the caller gets it) and the postprocess usage it made."""
        acted = mechanisms.judged(
            mechanisms.merged(work.mechanisms, mechanisms.from_decision(work.decided()), mechanisms.from_usage(usage)),
            work.decided(),
        )
        return self._arrive((work.request.tenant, work.request.request_id), "served", work, acted)

    def agrees(self, twin: Work, cached: Mapping) -> bool:
        """Would the `cached` decision (a dict) have done for the request a naive `twin` decided? As a verdict
        judges: the promotion of an L2 near-miss (streams/cache/stage.py)."""
        answer, text = cached.get("action_id"), cached.get("text")
        agreed, _ = same_answer(twin.request, answer, text, twin.decided(), self.text_agree)
        return agreed

    def naive(self, work: Work) -> Verdict | None:
        return self._arrive((work.request.tenant, work.request.request_id), "naive", work.decided(), [])

    def _arrive(self, key: tuple[str, str], side: str, value, acted: list[str]) -> Verdict | None:
        other = self.pending.pop(key, None)
        if other is None or other[0] == side:  # first half (a redelivered half replaces its earlier copy)
            self.pending[key] = (side, value, acted)
            while len(self.pending) > self.capacity:
                self.pending.popitem(last=False)
                self.expired += 1
            return None
        served, naive, acted = (value, other[1], acted) if side == "served" else (other[1], value, other[2])
        verdict = judge(served, naive, acted, self.text_agree)
        if self.learn is not None and "cache.l2" in acted:
            self.learn(served, verdict.kept)
        return verdict
