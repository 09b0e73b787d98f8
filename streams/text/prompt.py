"""The prompt a request would send, and its exact token count, in total and per section.

The context is history lines joined by newlines, a blank line, then `State: <state>`. Each piece is tokenized
once (short pieces hit tokens.count's cache); the total is derived from the pieces and the exact cost of each
join (tokens.join_tokens), so it equals counting the rendered context, and truncating to a contract needs no
re-rendering or re-counting. Where a join cannot be derived, the rendered context is counted whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from schemas.records import Request
from streams.text import tokens

STATE_JOIN = "\n\n"


def state_text(state) -> str:
    return state if isinstance(state, str) else orjson.dumps(state, option=orjson.OPT_SORT_KEYS).decode()


def history_lines(request: Request) -> list[str]:
    return [f"{turn.role}: {turn.content}" for turn in request.history]


def state_line(request: Request) -> str:
    return f"State: {state_text(request.state)}"


def render_context(request: Request, lines: list[str] | None = None) -> str:
    """The shared context every candidate is scored against: history (or the kept part), then the state."""
    lines = history_lines(request) if lines is None else lines
    history = "\n".join(lines)
    return f"{history}{STATE_JOIN}{state_line(request)}" if history else state_line(request)


@dataclass
class MeasuredContext:
    """A request's context, its pieces and their tokens. joins[i] is what joining line i to the next piece costs
    (None where it cannot be derived)."""

    request: Request
    model: str
    lines: list[str]
    line_tokens: list[int]
    joins: list[int | None]
    state_line_tokens: int

    def text(self, first: int = 0) -> str:
        """The context keeping the history from line `first` on."""
        return render_context(self.request, self.lines[first:])

    def estimate(self, first: int = 0) -> int:
        """The tokens of text(first): exact where every join is derived, else counting each underived join as
        its separator alone."""
        joins = (
            tokens.count(STATE_JOIN if i == len(self.lines) - 1 else "\n", self.model) if j is None else j
            for i, j in enumerate(self.joins[first:], first)
        )
        return self.state_line_tokens + sum(self.line_tokens[first:]) + sum(joins)

    def tokens(self, first: int = 0) -> int:
        """The exact tokens of text(first)."""
        if any(j is None for j in self.joins[first:]):
            return tokens.count(self.text(first), self.model)
        return self.estimate(first)

    def history_tokens(self) -> int:
        """The history section: each line counted alone."""
        return sum(self.line_tokens)


def measure_context(request: Request, model: str) -> MeasuredContext:
    lines = history_lines(request)
    state = state_line(request)
    after = [*lines[1:], state]
    joins = [
        tokens.join_tokens(line, STATE_JOIN if i == len(lines) - 1 else "\n", after[i], model)
        for i, line in enumerate(lines)
    ]
    return MeasuredContext(
        request, model, lines, [tokens.count(line, model) for line in lines], joins, tokens.count(state, model)
    )


def count_sections(
    request: Request,
    model: str,
    *,
    system: str = "",
    template: str = "",
    candidate_tokens: list[int] | None = None,
    history_tokens: int | None = None,
) -> dict[str, int]:
    """Exact tokens per prompt section (system, template, history, state, candidates): what usage can later be
    broken down by. `system` is the system prompt and `template` the rendered template's instruction text;
    `candidate_tokens` and `history_tokens`, when the caller counted them already, are not counted again."""

    def n(text: str) -> int:
        return tokens.count(text, model)

    if history_tokens is None:
        history_tokens = sum(n(line) for line in history_lines(request))
    return {
        "system": n(system),
        "template": n(template),
        "history": history_tokens,
        "state": n(state_text(request.state)),
        "candidates": sum(
            candidate_tokens if candidate_tokens is not None else map(n, (c.text for c in request.candidates))
        ),
    }
