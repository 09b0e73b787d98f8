"""L3 predictive cache: learn which questions follow which within a session, and pick follow-ups to
pre-answer within a token budget. Pre-answers go into the semantic cache marked predictive, so their hit
rate and their cost are reported apart from L1/L2 (workers/analytics/levels.py, `pre_answers`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from streams.cache.exact import BoundedLRU, normalize


@dataclass(frozen=True)
class Prefetch:
    question: str
    probability: float
    tokens: int  # estimated cost of answering it now


class FollowupModel:
    """Counts of question -> next question over sessions; bounded in sessions and in questions tracked."""

    def __init__(self, max_sessions: int = 100_000, max_questions: int = 100_000, max_followups: int = 20):
        self.last = BoundedLRU(max_sessions)  # session id -> last question (normalized)
        self.followups = BoundedLRU(max_questions)  # question -> Counter of next questions
        self.max_followups = max_followups
        self.text: dict[str, str] = {}  # normalized -> as first seen

    @staticmethod
    def _key(question: str) -> str:
        return normalize(question).lower()

    def observe(self, session_id: str, question: str) -> None:
        key = self._key(question)
        self.text.setdefault(key, question)
        previous = self.last.get(session_id)
        if previous is not None and previous != key:
            counts = self.followups.get(previous)
            if counts is None:
                counts = self.followups[previous] = Counter()
            counts[key] += 1
            if len(counts) > self.max_followups:
                del counts[min(counts, key=counts.get)]
        self.last[session_id] = key
        if len(self.text) > 2 * self.followups.max_entries:
            live = set(self.followups) | {q for c in self.followups.data.values() for q in c}
            self.text = {k: v for k, v in self.text.items() if k in live}

    def likely_next(self, question: str, k: int = 3, min_count: int = 1) -> list[tuple[str, float]]:
        """Up to k follow-ups seen at least `min_count` times, with their observed probability
        P(next | question), most likely first."""
        counts = self.followups.get(self._key(question))
        if not counts:
            return []
        total = sum(counts.values())
        return [(self.text.get(q, q), n / total) for q, n in counts.most_common(k) if n >= min_count]


class TenantFollowups:
    """One FollowupModel per tenant: a tenant's question sequences never shape another tenant's pre-answers
    (the most recent `max_tenants` tenants are kept)."""

    def __init__(self, max_tenants: int = 1000, max_sessions: int = 20_000, max_questions: int = 20_000):
        self.models = BoundedLRU(max_tenants)
        self.sizes = (max_sessions, max_questions)

    def of(self, tenant: str) -> FollowupModel:
        model = self.models.get(tenant)
        if model is None:
            model = self.models[tenant] = FollowupModel(*self.sizes)
        return model


def plan(
    model: FollowupModel,
    question: str,
    budget_tokens: int,
    cost: Callable[[str], int],
    cached: Callable[[str], bool] = lambda q: False,
    k: int = 5,
    min_probability: float = 0.2,
    min_count: int = 1,
) -> list[Prefetch]:
    """Follow-ups worth pre-answering: seen `min_count` times, likely enough, not cached yet, best expected hits
    per token first, within `budget_tokens` in all."""
    wanted = [(q, p) for q, p in model.likely_next(question, k, min_count) if p >= min_probability and not cached(q)]
    options = [Prefetch(q, p, cost(q)) for q, p in wanted]  # priced only when not cached: a count is not free
    options.sort(key=lambda o: o.probability / max(o.tokens, 1), reverse=True)
    chosen, spent = [], 0
    for option in options:
        if spent + option.tokens <= budget_tokens:
            chosen.append(option)
            spent += option.tokens
    return chosen
