"""The Decision as HTTP callers see it: token and cost headers beside the record's JSON."""

from __future__ import annotations

from schemas.records import Decision

COST_DIGITS = 8  # USD; a cheap decision costs fractions of a cent


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
