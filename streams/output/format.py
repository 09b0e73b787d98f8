"""The Decision as callers see it: a JSON body and, for HTTP callers, token and cost headers."""
from __future__ import annotations

from typing import Any

from schemas.records import Decision

COST_DIGITS = 8  # USD; a cheap decision costs fractions of a cent


def decision_body(decision: Decision, top_n: int = 5) -> dict[str, Any]:
    """The final answer: action (or text), top-N ranking, confidence, tier, decision chain, tokens, cost."""
    body: dict[str, Any] = {
        "request_id": decision.request_id,
        "action": decision.action_id or None,
        "ranking": [{"id": r.id, "score": round(r.score, 6)} for r in decision.ranking[:top_n]],
        "confidence": round(decision.confidence, 6),
        "tier": decision.tier,
        "chain": list(decision.chain),
        "tokens": {"input": decision.input_tokens, "cache_read": decision.cache_read_tokens,
                   "output": decision.output_tokens, "nominal": decision.nominal_tokens,
                   "saved": max(0, decision.nominal_tokens - decision.input_tokens - decision.output_tokens)},
        "cost": round(decision.cost, COST_DIGITS),
        "latency_ms": decision.latency_ms,
    }
    if decision.text:
        body["text"] = decision.text
    if decision.error:
        body["error"] = decision.error
    return body


def http_headers(decision: Decision) -> dict[str, str]:
    """Headers for HTTP callers (the same numbers as the body, readable without parsing it)."""
    return {
        "X-Request-Id": decision.request_id,
        "X-Input-Tokens": str(decision.input_tokens),
        "X-Cache-Read-Tokens": str(decision.cache_read_tokens),
        "X-Output-Tokens": str(decision.output_tokens),
        "X-Cost": f"{decision.cost:.{COST_DIGITS}f}",
        "X-Tier": decision.tier,
        "X-Confidence": f"{decision.confidence:.4f}",
    }
