"""Drift: a model server's count over Jev's, minus 1 (+0.05: the server counted 5% more), on two counts of a model's
calls. Tokens: Jev's count reserved the budget, the server's `usage` settles it (a tokenizer Jev maps wrongly
drifts). Cache reads: the prompt tokens Jev claimed the server's prefix cache would serve, its shared_context and
state_cache savings (streams/models/prefix.py), against the server's prompt_tokens_details.cached_tokens (a cache
evicting what Jev counts on, or prompts that put what changes first, drift). Either beyond ±TOLERANCE is alerted
(infra/prometheus/alerts.yml, `jev alerts`) and both are shown in `jev report`."""

from __future__ import annotations

TOLERANCE = 0.05
# The usage rows of the calls Jev claims cache reads on: a decision's model calls (each names its candidates) and the
# state_cache part split off them (streams/scoring/ledger.py). A generation (no candidates) claims none, so the
# prompt tokens a server's cache served it are no confirmation of a claim.
CLAIMING = "(candidates > 0 OR (stage = 'score' AND section = 'state_cache'))"


def claims_cache(stack: str, candidates: int) -> bool:
    """CLAIMING, for one usage row (its section is its stack's last frame, after the stage's)."""
    return candidates > 0 or stack.endswith(";score;state_cache")


def drift(jev: float, server: float, digits: int = 4) -> float | None:
    """server / jev − 1, None where Jev counted nothing (nothing to compare)."""
    return round(server / jev - 1, digits) if jev else None


def beyond(value: float | None, tolerance: float = TOLERANCE) -> bool:
    return value is not None and abs(value) > tolerance
