"""The decision engine: rules tier first, then the model tiers. Pure given its backends."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from schemas.records import Decision, Ranked, UsageEvent, Work
from streams import pricing
from streams.usage.events import usage_event
from workers.scoring import rules as rules_mod
from workers.scoring.backends import Backend


@dataclass
class Engine:
    fine: Backend
    rules: list = field(default_factory=list)
    top_n: int = 5

    def decide_batch(self, works: list[Work]) -> list[tuple[Decision, list[UsageEvent]]]:
        """The scoring worker's entry point: one micro-batch from Kafka, decisions in the same order."""
        return [(decision, [event]) for decision, event in map(self.decide, works)]

    def decide(self, work: Work) -> tuple[Decision, UsageEvent]:
        req = work.request
        ids = [c.id for c in req.candidates]
        nominal = naive_tokens(work)
        rule = rules_mod.match(self.rules, req.decision_type, req.state, ids)
        if rule is not None:
            decision = Decision(request_id=req.request_id, tier="rules", action_id=rule.action,
                                ranking=[Ranked(id=rule.action, score=1.0)], confidence=1.0,
                                chain=[f"rules:{rule.name}"], nominal_tokens=nominal)
            return decision, usage_event(req, "score", section="rules", nominal_tokens=nominal,
                                         candidates=len(ids))
        if not ids:
            decision = Decision(request_id=req.request_id, tier="fallback", nominal_tokens=nominal,
                                error="no candidates to rank and no generation backend configured",
                                chain=["fallback:no-candidates"])
            return decision, usage_event(req, "score", section="fallback", nominal_tokens=nominal,
                                         outcome="fallback")
        scored = self.fine.score(work.context, [c.text for c in req.candidates])
        order = sorted(range(len(ids)), key=lambda i: scored.scores[i], reverse=True)
        ranking = [Ranked(id=ids[i], score=round(scored.scores[i], 6)) for i in order[: self.top_n]]
        decision = Decision(
            request_id=req.request_id, tier="fine", action_id=ranking[0].id, ranking=ranking,
            confidence=confidence([scored.scores[i] for i in order]), chain=[f"fine:{self.fine.name}"],
            input_tokens=scored.input_tokens, cache_read_tokens=scored.cache_read_tokens,
            output_tokens=scored.output_tokens, nominal_tokens=nominal,
            cost=pricing.cost(self.fine.model, scored.input_tokens, scored.cache_read_tokens, scored.output_tokens))
        return decision, usage_event(req, "score", section="fine", model=self.fine.model,
                                     input_tokens=scored.input_tokens, cache_read_tokens=scored.cache_read_tokens,
                                     output_tokens=scored.output_tokens, nominal_tokens=nominal,
                                     candidates=len(ids), beam=len(ids))


def naive_tokens(work: Work) -> int:
    """What a naive system spends on the work left after distillation: every candidate re-reads the context."""
    return sum(work.context_tokens + t for t in work.candidate_tokens) or work.context_tokens


def confidence(sorted_scores: list[float], temperature: float = 0.1) -> float:
    """Softmax probability of the top candidate: near 1 when it clearly wins, 1/n when all tie."""
    if not sorted_scores:
        return 0.0
    top = sorted_scores[0]
    z = sum(math.exp((s - top) / temperature) for s in sorted_scores)
    return round(1.0 / z, 4)
