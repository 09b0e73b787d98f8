"""Price table: USD per million tokens (input, cached input, output) per model family.

The longest matching name prefix wins; models not in the table (rules, caches) cost nothing.
Self-hosted models get a price with `register` (e.g. the amortised GPU cost per million tokens).
"""

from __future__ import annotations

from typing import NamedTuple


class Price(NamedTuple):
    input: float
    cached_input: float
    output: float


PRICES = {
    "gpt-5": Price(1.25, 0.125, 10.00),
    "gpt-5-mini": Price(0.25, 0.025, 2.00),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4.1-nano": Price(0.10, 0.025, 0.40),
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "o3": Price(2.00, 0.50, 8.00),
    "o4-mini": Price(1.10, 0.275, 4.40),
    "gpt-4": Price(30.00, 30.00, 60.00),
    "gpt-3.5": Price(0.50, 0.50, 1.50),
    "all-MiniLM-L6-v2": Price(0.005, 0.0, 0.0),
    "SmolLM2-135M": Price(0.02, 0.005, 0.02),
    "bm25": Price(0.0, 0.0, 0.0),
}


def register(model: str, input: float, cached_input: float, output: float) -> None:
    if not model or min(input, cached_input, output) < 0:
        raise ValueError(f"price for {model!r}: need a model name and non-negative USD per 1M tokens")
    PRICES[model] = Price(float(input), float(cached_input), float(output))
    _RESOLVED.clear()


_RESOLVED: dict[str, str] = {}  # model → the PRICES key it matched ("" for none): every usage event is priced


def price(model: str) -> Price | None:
    key = _RESOLVED.get(model)
    if key is None or (key and key not in PRICES):
        matches = [m for m in PRICES if model.startswith(m)]
        key = _RESOLVED[model] = max(matches, key=len) if matches else ""
    return PRICES[key] if key else None


def cost(model: str, input_tokens: int, cache_read_tokens: int = 0, output_tokens: int = 0) -> float:
    """USD for one call; cache reads are a subset of input tokens, billed at the cached rate."""
    if min(input_tokens, cache_read_tokens, output_tokens) < 0 or cache_read_tokens > input_tokens:
        raise ValueError(
            f"cost({model!r}): token counts must be >= 0 and cache_read_tokens ({cache_read_tokens}) "
            f"<= input_tokens ({input_tokens}), which include cache reads"
        )
    p = price(model)
    if p is None:
        return 0.0
    fresh = input_tokens - cache_read_tokens
    return (fresh * p.input + cache_read_tokens * p.cached_input + output_tokens * p.output) / 1e6


def max_cost(model: str, input_tokens: int, max_output_tokens: int) -> float:
    """The most a call can cost: what a budget reservation holds before the call."""
    return cost(model, input_tokens, 0, max_output_tokens)
