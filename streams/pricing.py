"""Price table: USD per million tokens (input, cached input, output) per model family."""
from __future__ import annotations

PRICES = {
    "gpt-4o-mini": (0.15, 0.075, 0.60),
    "gpt-4o": (2.50, 1.25, 10.00),
    "gpt-4.1": (2.00, 0.50, 8.00),
    "gpt-4": (30.00, 30.00, 60.00),
    "gpt-3.5": (0.50, 0.50, 1.50),
    "all-MiniLM-L6-v2": (0.005, 0.0, 0.0),
    "SmolLM2-135M": (0.02, 0.005, 0.02),
    "bm25": (0.0, 0.0, 0.0),
}


def cost(model: str, input_tokens: int, cache_read_tokens: int = 0, output_tokens: int = 0) -> float:
    """USD for one call; cache reads are a subset of input tokens, billed at the cached rate."""
    matches = [m for m in PRICES if model.startswith(m)]
    if not matches:
        return 0.0
    p_in, p_cached, p_out = PRICES[max(matches, key=len)]
    fresh = input_tokens - cache_read_tokens
    return (fresh * p_in + cache_read_tokens * p_cached + output_tokens * p_out) / 1e6
