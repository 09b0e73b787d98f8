"""The decision engine: rules first, then coarse → fine (cascade), escalation, breakers and rollout.

Pure given its backends: the scoring worker calls `decide_batch`, `jev score` and bench/cascade.py call the
same code offline. Token attribution per mechanism is in ledger.py.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field

from schemas.records import Decision, Ranked, Request, UsageEvent, Work
from streams import tokens
from streams.ingest.prompt import render_context
from streams.scoring import backends, cascade, policy as policy_mod, rules as rules_mod, streaming
from streams.switches import SWITCHES
from streams.metrics import observe_breaker, observe_fallback
from streams.models import configure as configure_models
from streams.scoring.backends import Backend, Scored
from streams.scoring.ledger import Ledger

MODES = ("cascade", "fine-only", "coarse-only")


class Fallback(Exception):
    """A breaker tripped: the decision stops and falls back."""


@dataclass
class Ranking:
    order: list[int]  # candidate indices, best first
    scores: dict[int, float]
    tier: str
    confidence: float
    chain: list[str]


@dataclass
class Engine:
    coarse: Backend
    fine: Backend
    escalation: Backend | None = None
    config: policy_mod.Config = field(default_factory=policy_mod.load)
    rules: list = field(default_factory=list)
    mode: str = "cascade"
    top_n: int = 5
    counters: Counter = field(default_factory=Counter)
    switches: dict = field(default_factory=lambda: dict.fromkeys(SWITCHES, True))  # live: the control topic's
    generator: object | None = None  # answers generate requests (no candidates); streams/generation.py
    stream_config: object | None = None  # lengths per question type, chunk size and pace per client (stream.yaml)
    chunk_sink: object | None = None  # called with each Chunk of a streamed answer (the scoring worker sends it)
    clock: object = field(default_factory=lambda: streaming.Clock())  # where streams read time and wait
    patterns: str = ""  # cleanup patterns file of streamed text (settings.postprocess_patterns)

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")

    def decide_batch(self, works: list[Work]) -> list[tuple[Decision, list[UsageEvent]]]:
        """The scoring worker's entry point: one micro-batch, decisions in the same order. Contexts shared
        across the batch are encoded once through the backends' state caches."""
        return [self.decide(work) for work in works]

    def decide(self, work: Work) -> tuple[Decision, list[UsageEvent]]:
        if self.switches["score.rules"] and (ruled := rule_decision(self.rules, work)) is not None:
            self.counters["rules"] += 1
            return ruled
        start = time.perf_counter()
        req = work.request
        pol = self.config.policy(req.decision_type)
        ids = [c.id for c in req.candidates]
        lengths = candidate_lengths(work)
        nominal = nominal_tokens(work, lengths)
        ledger, outcome, iterations = Ledger(), "ok", 1
        if not ids and self.generator is not None:
            return self.generate(work, ledger, start)
        elif not ids:
            ledger.add("fallback", nominal)
            decision = Decision(request_id=req.request_id, tier="fallback", nominal_tokens=nominal,
                                error="no candidates to rank and no generation backend configured",
                                chain=["fallback:no-candidates"])
            self.counters["fallback"] += 1
            return decision, ledger.events(req, 0.0, "fallback", 0)
        elif work.tier_cap in ("rules", "fallback"):  # a budget degraded it: no model tokens
            ranking, outcome = self.fallback(work, pol, ledger, "budget"), "degraded"
            ledger.balance("fallback", nominal)
        else:
            budget = Budget(start, pol)
            try:
                if pol.max_iterations > 1 and any("/" in i for i in ids):
                    ranking, iterations = self.descend(work, lengths, pol, ledger, budget)
                    ledger.balance("hierarchy", nominal)
                else:
                    ranking = self.rank(work, list(range(len(ids))), lengths, pol, ledger, budget)
            except Fallback as stop:
                observe_breaker(str(stop))
                ranking, outcome = self.fallback(work, pol, ledger, str(stop)), "fallback"
                ledger.balance("fallback", nominal)
        action, chain = self.rollout(req, pol, ranking, ids)
        latency = (time.perf_counter() - start) * 1000
        self.counters[ranking.tier] += 1
        if latency > pol.timeout_ms:  # the budget is checked before each tier; a tier already running finishes
            self.counters["over_budget"] += 1
        input_tokens, cache_read, output, cost = ledger.totals()
        decision = Decision(
            request_id=req.request_id, tier=ranking.tier, action_id=action,
            ranking=[Ranked(id=ids[i], score=round(ranking.scores.get(i, 0.0), 6)) for i in ranking.order[:self.top_n]],
            confidence=ranking.confidence, chain=chain, input_tokens=input_tokens, cache_read_tokens=cache_read,
            output_tokens=output, nominal_tokens=nominal, cost=cost, latency_ms=round(latency, 3))
        return decision, ledger.events(req, round(latency, 3), outcome, iterations)

    def generate(self, work: Work, ledger: Ledger, start: float) -> tuple[Decision, list[UsageEvent]]:
        """A generate request: the generator answers from the (distilled) context within max_output_tokens."""
        req = work.request
        if req.stream:
            return streaming.stream_answer(self, work, ledger, start)
        out = self.generator.generate(work.context, req.contracts.max_output_tokens)
        ledger.add("generate", work.context_tokens + out.output_tokens, out.model,
                   Scored([], out.input_tokens, 0, out.output_tokens))
        input_tokens, cache_read, output, cost = ledger.totals()
        latency = round((time.perf_counter() - start) * 1000, 3)
        self.counters["llm"] += 1
        decision = Decision(request_id=req.request_id, tier="llm", text=out.text, confidence=0.0,
                            chain=[f"generate:{self.generator.name}:{out.label}"], input_tokens=input_tokens,
                            cache_read_tokens=cache_read, output_tokens=output,
                            nominal_tokens=work.context_tokens + out.output_tokens, cost=cost, latency_ms=latency)
        return decision, ledger.events(req, latency, "ok", 1)

    def rank(self, work: Work, subset: list[int], lengths: list[int], pol: policy_mod.Policy, ledger: Ledger,
             budget: "Budget", texts: list[str] | None = None) -> Ranking:
        """Order `subset` (indices into the candidates, or into `texts` when given) with the model tiers."""
        texts = texts or [c.text for c in work.request.candidates]
        context, ctx = work.context, work.context_tokens
        sub_texts = [texts[i] for i in subset]
        mode = self.mode if self.switches["score.cascade"] else "fine-only"
        if work.tier_cap == "coarse":  # a budget degraded it to the cheap tier
            mode = "coarse-only"
        if mode == "fine-only" or (mode == "cascade" and len(subset) <= pol.coarse_k_min):
            kept, coarse_scores = subset, {}
        else:
            scored = self.coarse.score(context, sub_texts)
            coarse_scores = dict(zip(subset, scored.scores))
            if mode == "coarse-only":
                ledger.add("coarse", sum(ctx + lengths[i] for i in subset), self.coarse.model, scored, len(subset))
                order = sorted(subset, key=lambda i: coarse_scores[i], reverse=True)
                return Ranking(order, coarse_scores, "coarse",
                               cascade.confidence(scored.scores, self.coarse.temperature), [f"coarse:{self.coarse.name}"])
            hardness = cascade.difficulty(scored.scores, ctx)
            k = cascade.beam_width(hardness, pol.coarse_k_min, pol.coarse_k_max, len(subset))
            picked = cascade.mmr_select(scored.scores, sub_texts, k, pol.mmr_lambda)
            kept = [subset[j] for j in picked]
            pruned = sorted(set(subset) - set(kept), key=lambda i: coarse_scores[i], reverse=True)
            widest = max(0, pol.coarse_k_max - k)
            ledger.add("beam", sum(ctx + lengths[i] for i in pruned[:widest]), beam=k)
            ledger.add("cascade", sum(ctx + lengths[i] for i in pruned[widest:]), self.coarse.model, scored,
                       len(subset), k)
        budget.check(ledger, ctx + sum(lengths[i] for i in kept))
        chain = [f"coarse:{self.coarse.name}:{len(kept)}/{len(subset)}"] if coarse_scores else []
        fine = self.fine.score(context, [texts[i] for i in kept])
        ledger.add("shared_context", (len(kept) - 1) * ctx)
        ledger.add_model_call("fine", ctx + sum(lengths[i] for i in kept), self.fine.model, fine, len(kept))
        scores = {**coarse_scores, **dict(zip(kept, fine.scores))}
        order = sorted(kept, key=lambda i: scores[i], reverse=True)
        tier, conf = "fine", cascade.confidence(fine.scores, self.fine.temperature)
        chain.append(f"fine:{self.fine.name}")
        if self.escalation is not None and conf < pol.escalate_below:
            top = order[:pol.coarse_k_min]
            budget.check(ledger, ctx + sum(lengths[i] for i in top))
            esc = self.escalation.score(context, [texts[i] for i in top])
            ledger.add("escalation", 0, self.escalation.model, esc, len(top), len(top))
            scores.update(zip(top, esc.scores))
            order = sorted(top, key=lambda i: scores[i], reverse=True) + order[len(top):]
            tier, conf = "llm", cascade.confidence(esc.scores, self.escalation.temperature)
            chain.append(f"escalation:{self.escalation.name}")
        rest = sorted(set(subset) - set(kept), key=lambda i: coarse_scores.get(i, 0.0), reverse=True)
        return Ranking(order + rest, scores, tier, conf, chain)

    def descend(self, work: Work, lengths: list[int], pol: policy_mod.Policy, ledger: Ledger,
                budget: "Budget") -> tuple[Ranking, int]:
        """Hierarchical decision over ids like region/warehouse/qty, one level per iteration. Choosing the
        current prefix again (an id that is also a parent) is a loop: it ends the decision."""
        ids = [c.id for c in work.request.candidates]
        texts = [c.text for c in work.request.candidates]
        prefix, chain, ranking = "", [], None
        for iteration in range(1, pol.max_iterations + 1):
            options = children(ids, prefix)
            groups = list(options)
            if len(groups) == 1:
                choice = groups[0]
            else:
                labels = ["; ".join(texts[i] for i in options[g][:3]) for g in groups]
                sub_lengths = [tokens.count(t, work.model) for t in labels]
                ranking = self.rank(work, list(range(len(groups))), sub_lengths, pol, ledger, budget, labels)
                choice = groups[ranking.order[0]]
            chain.append(f"step{iteration}:{choice}")
            if choice == prefix or choice in ids and not children(ids, choice).keys() - {choice}:
                chain.append("loop-detected" if choice == prefix else "leaf")
                leaf = ids.index(choice)
                return Ranking([leaf], {leaf: 1.0}, ranking.tier if ranking else "rules",
                               ranking.confidence if ranking else 1.0, chain), iteration
            prefix = choice
        under = [i for i, x in enumerate(ids) if x == prefix or x.startswith(prefix + "/")]
        final = self.rank(work, under, lengths, pol, ledger, budget)
        final.chain = chain + ["max_iterations"] + final.chain
        return final, pol.max_iterations

    def fallback(self, work: Work, pol: policy_mod.Policy, ledger: Ledger, reason: str) -> Ranking:
        """A breaker tripped: the policy's fallback action when offered, else the coarse (lexical) order."""
        self.counters[f"fallback_{reason}"] += 1
        observe_fallback(reason)
        ids = [c.id for c in work.request.candidates]
        if pol.fallback_action in ids:
            i = ids.index(pol.fallback_action)
            return Ranking([i], {i: 1.0}, "fallback", 0.0, [f"fallback:{reason}:policy"])
        scores = backends.LexicalBackend().score(work.context, [c.text for c in work.request.candidates]).scores
        order = sorted(range(len(ids)), key=lambda i: scores[i], reverse=True)
        return Ranking(order, dict(enumerate(scores)), "fallback", 0.0, [f"fallback:{reason}:lexical"])

    def rollout(self, req: Request, pol: policy_mod.Policy, ranking: Ranking, ids: list[str]) -> tuple[str, list[str]]:
        """Shadow mode, rollout percentage and exploration; returns the action sent and the chain."""
        model_action, chain = ids[ranking.order[0]], list(ranking.chain)
        if ranking.tier in ("rules", "fallback"):
            return model_action, chain
        if pol.shadow:
            agree = model_action == req.human_decision
            self.counters["shadow_agree" if agree else "shadow_disagree"] += 1
            chain.append(f"shadow:{'agree' if agree else 'disagree'}:model={model_action}")
            return req.human_decision or model_action, chain
        if bucket(req.request_id, "rollout") >= pol.rollout_percent / 100 and req.human_decision:
            chain.append(f"rollout:legacy:model={model_action}")
            return req.human_decision, chain
        if len(ranking.order) > 1 and bucket(req.request_id, "explore") < pol.exploration:
            self.counters["explored"] += 1
            chain.append(f"explore:second-best:model={model_action}")
            return ids[ranking.order[1]], chain
        return model_action, chain


def candidate_lengths(work: Work) -> list[int]:
    return work.candidate_tokens or [tokens.count(c.text, work.model) for c in work.request.candidates]


def nominal_tokens(work: Work, lengths: list[int]) -> int:
    """What a naive system sends: the context once per candidate, Σ_i (context + candidate_i)."""
    return sum(work.context_tokens + n for n in lengths) or work.context_tokens


def rule_decision(rules: list, work: Work) -> tuple[Decision, list[UsageEvent]] | None:
    """The rules tier on its own, zero tokens: the decision and usage of the first rule that matches, or None.
    The engine tries it first; the stage process tries it too, before a work would leave it for the scoring
    workers (streams.local.LocalAnswers). No rollout, shadow or exploration applies to a rule."""
    start = time.perf_counter()
    req = work.request
    ids = [c.id for c in req.candidates]
    rule = rules_mod.match(rules, req.decision_type, req.state, ids)
    if rule is None:
        return None
    nominal, ledger = nominal_tokens(work, candidate_lengths(work)), Ledger()
    ledger.add("rules", nominal, candidates=len(ids))
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(request_id=req.request_id, tier="rules", action_id=rule.action,
                        ranking=[Ranked(id=rule.action, score=1.0)], confidence=1.0, chain=[f"rules:{rule.name}"],
                        nominal_tokens=nominal, latency_ms=latency)
    return decision, ledger.events(req, latency, "ok", 1)


@dataclass
class Budget:
    """The breakers of one decision: its token cap and its time budget."""
    start: float
    pol: policy_mod.Policy

    def check(self, ledger: Ledger, next_call_tokens: int) -> None:
        if (time.perf_counter() - self.start) * 1000 > self.pol.timeout_ms:
            raise Fallback("timeout")
        if ledger.actual + next_call_tokens > self.pol.token_cap:
            raise Fallback("token_cap")


def children(ids: list[str], prefix: str) -> dict[str, list[int]]:
    """The next level under `prefix`: child prefix → candidate indices below it (the prefix itself when
    it is a candidate id too)."""
    depth = prefix.count("/") + 1 if prefix else 0
    groups: dict[str, list[int]] = {}
    for i, x in enumerate(ids):
        if x == prefix or x.startswith(prefix + "/" if prefix else ""):
            key = x if x == prefix else "/".join(x.split("/")[: depth + 1])
            groups.setdefault(key, []).append(i)
    return groups


def bucket(request_id: str, salt: str) -> float:
    """A stable share in [0, 1) per request id: the same request always lands in the same bucket."""
    digest = hashlib.blake2b(f"{salt}:{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def work_for(request: Request, model: str) -> Work:
    """The Work ingest would hand on, for offline scoring (`jev score`, benchmarks): no distillation."""
    context = render_context(request)
    return Work(request=request, admitted_at=time.time(), model=model, context=context,
                context_tokens=tokens.count(context, model),
                candidate_tokens=[tokens.count(c.text, model) for c in request.candidates])


def build_engine(settings, mode: str = "cascade") -> Engine:
    """The engine the scoring worker runs: tiers from decision_types.yaml (settings.backend, when not
    `auto`, names the fine tier), rules from settings.rules. Models load here, once."""
    configure_models(settings.model_threads)
    config = policy_mod.load(settings.decision_types)
    fine = settings.backend if settings.backend != "auto" else config.tiers["fine"]
    escalation = config.tiers.get("escalation", "none")
    from streams.generation import load_generator
    from streams.postprocess import stream as stream_config

    return Engine(coarse=backends.load(config.tiers["coarse"]), fine=backends.load(fine),
                  escalation=None if escalation in ("", "none") else backends.load(escalation),
                  config=config, rules=rules_mod.load(settings.rules), mode=mode,
                  generator=load_generator(settings.generator, settings.default_model),
                  stream_config=stream_config.load(settings.stream_config), patterns=settings.postprocess_patterns)


def known_decision_types(path: str = "") -> set[str]:
    return policy_mod.known_decision_types(path)
