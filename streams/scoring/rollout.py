"""Rollout of a model's choice: shadow mode (the human decision is served, agreement recorded), a rollout
percentage (the rest keep the legacy decision) and exploration (a stable share gets the second best)."""

from __future__ import annotations

import hashlib
from collections import Counter

from schemas.records import Request
from streams.scoring import policy as policy_mod
from streams.scoring.steps import Ranking


def rollout(
    req: Request, pol: policy_mod.Policy, ranking: Ranking, ids: list[str], counters: Counter
) -> tuple[str, list[str]]:
    """The action sent and the decision chain."""
    model_action, chain = ids[ranking.order[0]], list(ranking.chain)
    if ranking.tier in ("rules", "fallback"):
        return model_action, chain
    if pol.shadow:
        agree = model_action == req.human_decision
        counters["shadow_agree" if agree else "shadow_disagree"] += 1
        chain.append(f"shadow:{'agree' if agree else 'disagree'}:model={model_action}")
        return req.human_decision or model_action, chain
    if bucket(req.request_id, "rollout") >= pol.rollout_percent / 100 and req.human_decision:
        chain.append(f"rollout:legacy:model={model_action}")
        return req.human_decision, chain
    if len(ranking.order) > 1 and bucket(req.request_id, "explore") < pol.exploration:
        counters["explored"] += 1
        chain.append(f"explore:second-best:model={model_action}")
        return ids[ranking.order[1]], chain
    return model_action, chain


def bucket(request_id: str, salt: str) -> float:
    """A stable share in [0, 1) per request id: the same request always lands in the same bucket."""
    digest = hashlib.blake2b(f"{salt}:{request_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
