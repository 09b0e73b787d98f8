"""Cascade ranking: the coarse tier scores every candidate, keeps a dynamic beam (MMR, diversity-penalised), the
fine tier re-ranks it, and a low-confidence answer escalates to a bigger model. A generator (streams.scoring.steps):
each model call is yielded, so the batch driver serves the calls of many decisions at once."""

from __future__ import annotations

from schemas.records import Work
from streams.scoring import cascade
from streams.scoring import policy as policy_mod
from streams.scoring.breakers import DecisionBreakers
from streams.scoring.ledger import Ledger
from streams.scoring.steps import Call, Deciding, Ranking


def rank(
    tiers,
    work: Work,
    subset: list[int],
    lengths: list[int],
    pol: policy_mod.Policy,
    ledger: Ledger,
    breakers: DecisionBreakers,
    texts: list[str] | None = None,
) -> Deciding[Ranking]:
    """Order `subset` (indices into the candidates, or into `texts` when given) with the model tiers of `tiers`
    (the engine: coarse, fine, escalation, mode, switches); returns a Ranking."""
    texts = texts or [c.text for c in work.request.candidates]
    context, ctx = work.context, work.context_tokens
    sub_texts = [texts[i] for i in subset]
    mode = tiers.mode if tiers.switches["score.cascade"] else "fine-only"
    if work.tier_cap == "coarse":  # a budget degraded it to the cheap tier
        mode = "coarse-only"
    coarse = tiers.coarse
    if mode == "fine-only" or (mode == "cascade" and len(subset) <= pol.coarse_k_min):
        kept, coarse_scores = subset, {}
    else:
        scored = yield Call(coarse, context, sub_texts, breakers.until())
        coarse_scores = dict(zip(subset, scored.scores))
        if mode == "coarse-only":
            ledger.add("coarse", sum(ctx + lengths[i] for i in subset), coarse.model, scored, len(subset))
            order = sorted(subset, key=lambda i: coarse_scores[i], reverse=True)
            return Ranking(
                order,
                coarse_scores,
                "coarse",
                cascade.confidence(scored.scores, coarse.temperature),
                [f"coarse:{coarse.name}"],
            )
        hardness = cascade.difficulty(scored.scores, ctx)
        k = cascade.beam_width(hardness, pol.coarse_k_min, pol.coarse_k_max, len(subset))
        picked = cascade.mmr_select(scored.scores, sub_texts, k, pol.mmr_lambda)
        kept = [subset[j] for j in picked]
        pruned = sorted(set(subset) - set(kept), key=lambda i: coarse_scores[i], reverse=True)
        widest = max(0, pol.coarse_k_max - k)
        ledger.add("beam", sum(ctx + lengths[i] for i in pruned[:widest]), beam=k)
        ledger.add("cascade", sum(ctx + lengths[i] for i in pruned[widest:]), coarse.model, scored, len(subset), k)
    breakers.check(ledger, ctx + sum(lengths[i] for i in kept))
    chain = [f"coarse:{coarse.name}:{len(kept)}/{len(subset)}"] if coarse_scores else []
    fine_tier = tiers.fine_for(work)
    fine = yield Call(fine_tier, context, [texts[i] for i in kept], breakers.until())
    ledger.add("shared_context", (len(kept) - 1) * ctx)
    ledger.add_model_call("fine", ctx + sum(lengths[i] for i in kept), fine_tier.model, fine, len(kept))
    scores = {**coarse_scores, **dict(zip(kept, fine.scores))}
    order = sorted(kept, key=lambda i: scores[i], reverse=True)
    tier, conf = "fine", cascade.confidence(fine.scores, fine_tier.temperature)
    chain.append(f"fine:{fine_tier.name}")
    escalation = tiers.escalation
    if escalation is not None and conf < pol.escalate_below:
        top = order[: pol.coarse_k_min]
        breakers.check(ledger, ctx + sum(lengths[i] for i in top))
        esc = yield Call(escalation, context, [texts[i] for i in top], breakers.until())
        ledger.add("escalation", 0, escalation.model, esc, len(top), len(top))
        scores.update(zip(top, esc.scores))
        order = sorted(top, key=lambda i: scores[i], reverse=True) + order[len(top) :]
        tier, conf = "llm", cascade.confidence(esc.scores, escalation.temperature)
        chain.append(f"escalation:{escalation.name}")
    rest = sorted(set(subset) - set(kept), key=lambda i: coarse_scores.get(i, 0.0), reverse=True)
    return Ranking(order + rest, scores, tier, conf, chain)
