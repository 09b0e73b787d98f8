"""The decision engine: rules first, then the model tiers (cascade ranking, or hierarchy descent for multi-step
decisions) under the decision's breakers, then rollout.

Pure given its backends: the scoring worker calls `decide_batch`, and `jev score` and bench/cascade.py call the
same code offline. Each decision is a generator of backend calls driven a micro-batch at a time
(streams.scoring.microbatch); the concepts live beside it (ranking, hierarchy, breakers, rollout, rules,
generate, factory, ledger).
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.records import Chunk, Decision, Ranked, UsageEvent, Work
from streams.core import deadlines
from streams.core.cancels import Cancels
from streams.core.metrics import observe_breaker, observe_fallback
from streams.core.switches import SWITCHES
from streams.models.protocol import Generator, Scorer
from streams.output.chunks import StreamConfig
from streams.scoring import policy as policy_mod
from streams.scoring import streaming
from streams.scoring.breakers import DecisionBreakers, Fallback, fallback_ranking
from streams.scoring.generate import generated_decision
from streams.scoring.hierarchy import descend
from streams.scoring.language_routes import FineTiers
from streams.scoring.ledger import Ledger, candidate_lengths, nominal_tokens
from streams.scoring.microbatch import drive
from streams.scoring.ranking import rank
from streams.scoring.rollout import rollout
from streams.scoring.rules import rule_decision
from streams.scoring.steps import Deciding

MODES = ("cascade", "fine-only", "coarse-only")


def held_to(pol: policy_mod.Policy, work: Work) -> policy_mod.Policy:
    """A decision under hard budgets spends at most what it holds of them (streams.budgets.reserve): its token cap
    is that hold, so a tier that would spend past it falls back (token_cap) instead of overspending."""
    if not work.budget_tokens or work.budget_tokens >= pol.token_cap:
        return pol
    return dataclasses.replace(pol, token_cap=work.budget_tokens)


@dataclass
class Engine:
    coarse: Scorer
    fine: Scorer
    escalation: Scorer | None = None
    config: policy_mod.Config = field(default_factory=policy_mod.load)
    rules: list = field(default_factory=list)
    mode: str = "cascade"
    top_n: int = 5
    counters: Counter = field(default_factory=Counter)
    switches: dict = field(default_factory=lambda: dict.fromkeys(SWITCHES, True))  # live: the control topic's
    generator: Generator | None = None  # answers generate requests (no candidates); streams/models/
    reservation_ttl_s: float = 0.0  # a work whose budget reservation is older gets no model tokens (0 = no limit)
    stream_config: StreamConfig | None = None  # lengths per question type, chunk size and pace per client (stream.yaml)
    chunk_sink: Callable[[Chunk], None] | None = None  # each Chunk of a streamed answer (the scoring worker sends it)
    clock: streaming.Clock = field(default_factory=streaming.Clock)  # where streams read time and wait
    patterns: str = ""  # cleanup patterns file of streamed text (settings.postprocess_patterns)
    deadlines: bool = True  # honour each request's deadline_ms (the naive shadow engine has no breakers)
    fine_tiers: FineTiers | None = None  # the fine tier per language and decision type (None: `fine` for all)
    metered: bool = True  # breaker trips and fallbacks move the process's metrics (not the warm-up's: warmup.py)
    cancels: Cancels = field(default_factory=Cancels)  # streams whose caller went away: stopped (the control topic's)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")

    def decide_batch(self, works: list[Work]) -> list[tuple[Decision, list[UsageEvent]]]:
        """The scoring worker's entry point: one micro-batch, decisions in the same order, one backend call per
        tier round across all of them. Each decision keeps its own breakers (its deadline from admission, the timeout
        from its start, its token cap). The works whose caller set a deadline are decided first, together and
        earliest deadline first, then the rest (deadline_first): an urgent decision's model call is not one with a
        large batch of others, and every decision is the one the unordered batch gives."""
        results: list = [None] * len(works)
        for part in self.deadline_first(works):
            for i, result in zip(part, drive([self.deciding(works[i]) for i in part])):
                results[i] = result
        return results

    def deadline_first(self, works: list[Work]) -> list[list[int]]:
        """The parts `works` are decided in (streams.core.deadlines.deadline_first): one when deadlines are not
        honoured."""
        return deadlines.deadline_first(works, self.deadline)

    def decide(self, work: Work) -> tuple[Decision, list[UsageEvent]]:
        return self.decide_batch([work])[0]

    def deciding(self, work: Work) -> Deciding[tuple[Decision, list[UsageEvent]]]:
        """One decision as a generator of backend calls; returns (Decision, usage events)."""
        if self.switches["score.rules"] and (ruled := rule_decision(self.rules, work)) is not None:
            self.counters["rules"] += 1
            return ruled
        start = time.perf_counter()
        req = work.request
        pol = held_to(self.config.policy(req.decision_type), work)
        ids = [c.id for c in req.candidates]
        lengths = candidate_lengths(work)
        nominal = nominal_tokens(work, lengths)
        ledger, outcome, iterations = Ledger(), "ok", 1
        if not ids and self.generator is not None and req.stream:
            return streaming.stream_answer(self, work, ledger, start)
        if not ids and self.generator is not None:
            self.counters["llm"] += 1
            return generated_decision(self.generator, work, start, pol)
        elif not ids:
            ledger.add("fallback", nominal)
            decision = Decision(
                request_id=req.request_id,
                tier="fallback",
                nominal_tokens=nominal,
                error="no candidates to rank and no generation backend configured",
                chain=["fallback:no-candidates"],
            )
            self.counters["fallback"] += 1
            return decision, ledger.events(req, 0.0, "fallback", 0)
        elif work.tier_cap in ("rules", "fallback"):  # a budget degraded it: no model tokens
            ranking, outcome = self.fallback(work, pol, "budget"), "degraded"
            ledger.balance("fallback", nominal)
        elif self.reservation_expired(work):  # its lease may be reclaimed: spending now could overshoot
            ranking, outcome = self.fallback(work, pol, "reservation_expired"), "degraded"
            ledger.balance("fallback", nominal)
        else:
            breakers = DecisionBreakers(start, pol, self.deadline(work))
            try:
                if pol.max_iterations > 1 and any("/" in i for i in ids):
                    ranking, iterations = yield from descend(self, work, lengths, pol, ledger, breakers)
                    ledger.balance("hierarchy", nominal)
                else:
                    ranking = yield from rank(self, work, list(range(len(ids))), lengths, pol, ledger, breakers)
            except Fallback as stop:
                reason = breakers.ran_out(str(stop))
                if self.metered:
                    observe_breaker(reason)
                ranking, outcome = self.fallback(work, pol, reason), "fallback"
                ledger.balance("fallback", nominal)
        action, chain = rollout(req, pol, ranking, ids, self.counters)
        latency = (time.perf_counter() - start) * 1000
        self.counters[ranking.tier] += 1
        if latency > pol.timeout_ms:  # the breakers are checked before each tier; a tier already running finishes
            self.counters["over_budget"] += 1
        input_tokens, cache_read, output, cost = ledger.totals()
        decision = Decision(
            request_id=req.request_id,
            tier=ranking.tier,
            action_id=action,
            ranking=[
                Ranked(id=ids[i], score=round(ranking.scores.get(i, 0.0), 6)) for i in ranking.order[: self.top_n]
            ],
            confidence=ranking.confidence,
            chain=chain,
            input_tokens=input_tokens,
            cache_read_tokens=cache_read,
            output_tokens=output,
            nominal_tokens=nominal,
            cost=cost,
            latency_ms=round(latency, 3),
        )
        return decision, ledger.events(req, round(latency, 3), outcome, iterations)

    def fine_for(self, work: Work) -> Scorer:
        return self.fine_tiers.choose(work) if self.fine_tiers is not None else self.fine

    def deadline(self, work: Work) -> float:
        """When the caller stops waiting (epoch seconds; 0 = no deadline): admission plus its deadline_ms."""
        return deadlines.deadline(work) if self.deadlines else 0.0

    def reservation_expired(self, work: Work) -> bool:
        return bool(work.budget_holds) and 0 < self.reservation_ttl_s < time.time() - work.admitted_at

    def fallback(self, work: Work, pol: policy_mod.Policy, reason: str):
        """A breaker tripped (or a budget degraded the request): counted, then the fallback ranking."""
        self.counters[f"fallback_{reason}"] += 1
        if self.metered:
            observe_fallback(reason)
        return fallback_ranking(work, pol, reason)
