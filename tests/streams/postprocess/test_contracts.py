"""Output contracts: below min one stricter retry through the caller's backend, the better result kept."""

from __future__ import annotations

import pytest

from streams.postprocess.contracts import OUTCOMES, enforce
from streams.text import tokens

SHORT = "Sure! Use a set."
LONG = (
    "Use a set: membership tests are O(1) on average, so checking each of n items costs O(n) in total "
    "instead of O(n^2) with a list."
)


class Backend:
    """A stand-in generation backend that answers from a script and records what it was asked."""

    def __init__(self, answer: str):
        self.answer, self.instructions = answer, []

    def __call__(self, instruction: str) -> str:
        self.instructions.append(instruction)
        return self.answer


@pytest.mark.parametrize(
    "text, min_tokens, max_tokens, retry, outcome, kept",
    [
        (LONG, 5, 100, None, "ok", LONG),
        (LONG, 0, 10, None, "truncated", None),
        (SHORT, 10, 100, None, "short", "Use a set."),
        (SHORT, 10, 100, LONG, "retried_ok", LONG),
        (SHORT, 10, 100, "No.", "retried_worse", "Use a set."),
        (SHORT, 100, 200, LONG, "retried_short", LONG),
    ],
)
def test_outcomes(text, min_tokens, max_tokens, retry, outcome, kept):
    backend = Backend(retry) if retry is not None else None
    result = enforce(text, model="gpt-4o", min_tokens=min_tokens, max_tokens=max_tokens, regenerate=backend)
    assert result.outcome == outcome and outcome in OUTCOMES
    assert result.cleaned.tokens_after <= max_tokens
    if kept is not None:
        assert result.cleaned.text == kept
    assert result.retried == (retry is not None)
    if backend:
        assert len(backend.instructions) == 1  # one retry, never more
        assert f"at least {min_tokens} tokens" in backend.instructions[0]
        assert result.retry_tokens == tokens.count(retry, "gpt-4o")
