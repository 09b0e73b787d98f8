"""Output contracts: at most max_tokens (cut by clean), at least min_tokens (one stricter retry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from streams.output.clean import Cleaned, clean
from streams.output.patterns import Patterns

# Every outcome of a contract check; the postprocess usage event carries one of them in `outcome`.
OUTCOMES = ("ok", "truncated", "short", "retried_ok", "retried_short", "retried_worse")
RETRY_INSTRUCTION = (
    "Your previous answer was too short ({tokens} tokens). Answer again in full, in at least "
    "{min_tokens} tokens{limit}, with no preamble and no closing remarks."
)


@dataclass
class Contracted:
    cleaned: Cleaned
    outcome: str  # one of OUTCOMES
    retried: bool = False
    retry_tokens: int = 0  # tokens the retry generated (spent whether kept or not)


def _rank(c: Cleaned) -> tuple[bool, int]:
    """Better: meets the minimum, then more tokens kept."""
    return (not c.short, c.tokens_after)


def enforce(
    text: str,
    *,
    model: str,
    max_tokens: int | None = None,
    min_tokens: int = 0,
    regenerate: Callable[[str], str] | None = None,
    config: Patterns | str | None = None,
) -> Contracted:
    """Clean `text` under the contracts; below `min_tokens`, ask `regenerate(instruction)` once for a
    longer answer (the backend the caller supplies) and keep the better of the two cleaned results."""
    first = clean(text, model=model, max_tokens=max_tokens, min_tokens=min_tokens, config=config)
    if not first.short:
        return Contracted(first, "truncated" if first.truncated else "ok")
    if regenerate is None:
        return Contracted(first, "short")
    limit = f" and at most {max_tokens}" if max_tokens is not None else ""
    instruction = RETRY_INSTRUCTION.format(tokens=first.tokens_after, min_tokens=min_tokens, limit=limit)
    second = clean(regenerate(instruction), model=model, max_tokens=max_tokens, min_tokens=min_tokens, config=config)
    if _rank(second) <= _rank(first):
        return Contracted(first, "retried_worse", retried=True, retry_tokens=second.tokens_before)
    return Contracted(
        second, "retried_short" if second.short else "retried_ok", retried=True, retry_tokens=second.tokens_before
    )
