"""The breakers of one decision (its token cap, its time budget and its caller's deadline) and the ranking it falls
back to when one trips. Not the tenant budgets of streams/budgets/book.py: these bound a single decision's model
work."""

from __future__ import annotations

import time
from dataclasses import dataclass

from schemas.records import Work
from streams.models.lexical import LexicalBackend
from streams.scoring import policy as policy_mod
from streams.scoring.ledger import Ledger
from streams.scoring.steps import Ranking


class Fallback(Exception):
    """A breaker tripped: the decision stops and falls back."""


@dataclass
class DecisionBreakers:
    """Checked before each model tier: the request's deadline (`deadline`, epoch seconds: its admission plus the
    caller's deadline_ms; 0 = none), which counts the time the request queued before scoring; the time since the
    decision started against the decision type's timeout_ms, which bounds the model work itself; and the tokens
    spent so far plus the next call's against its token cap. A tier already running finishes."""

    start: float
    pol: policy_mod.Policy
    deadline: float = 0.0

    def check(self, ledger: Ledger, next_call_tokens: int) -> None:
        if self.deadline and time.time() > self.deadline:
            raise Fallback("deadline")
        if (time.perf_counter() - self.start) * 1000 > self.pol.timeout_ms:
            raise Fallback("timeout")
        if ledger.actual + next_call_tokens > self.pol.token_cap:
            raise Fallback("token_cap")

    def ran_out(self, reason: str) -> str:
        """The reason of a model call that ended for lack of time (`deadline`: the call's time, until(), ran out):
        the caller's deadline when it has passed or was the nearer limit, else the decision type's budget
        (`timeout`). Other reasons stay."""
        if reason != "deadline" or not self.deadline:
            return "timeout" if reason == "deadline" else reason
        budget_end = time.time() + self.pol.timeout_ms / 1000 - (time.perf_counter() - self.start)
        return "deadline" if time.time() >= self.deadline or self.deadline <= budget_end else "timeout"

    def until(self) -> float:
        """Epoch seconds the next model call must end by: the earlier of the caller's deadline and the end of the
        decision type's time budget."""
        budget_end = time.time() + self.pol.timeout_ms / 1000 - (time.perf_counter() - self.start)
        return min(budget_end, self.deadline) if self.deadline else budget_end


def fallback_ranking(work: Work, pol: policy_mod.Policy, reason: str) -> Ranking:
    """The policy's fallback action when offered, else the coarse (lexical) order: no model tokens."""
    ids = [c.id for c in work.request.candidates]
    if pol.fallback_action in ids:
        i = ids.index(pol.fallback_action)
        return Ranking([i], {i: 1.0}, "fallback", 0.0, [f"fallback:{reason}:policy"])
    scores = LexicalBackend().score(work.context, [c.text for c in work.request.candidates]).scores
    order = sorted(range(len(ids)), key=lambda i: scores[i], reverse=True)
    return Ranking(order, dict(enumerate(scores)), "fallback", 0.0, [f"fallback:{reason}:lexical"])
