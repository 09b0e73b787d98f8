"""The prompt a request would send, and its exact token count per section."""
from __future__ import annotations

import orjson

from schemas.records import Request
from streams import tokens


def state_text(state) -> str:
    return state if isinstance(state, str) else orjson.dumps(state, option=orjson.OPT_SORT_KEYS).decode()


def history_lines(request: Request) -> list[str]:
    return [f"{turn.role}: {turn.content}" for turn in request.history]


def render_context(request: Request, lines: list[str] | None = None) -> str:
    """The shared context every candidate is scored against: history (or the kept part), then the state."""
    lines = history_lines(request) if lines is None else lines
    history = "\n".join(lines)
    return f"{history}\n\nState: {state_text(request.state)}" if history else f"State: {state_text(request.state)}"


def count_sections(request: Request, model: str, *, system: str = "", template: str = "",
                   candidate_tokens: list[int] | None = None) -> dict[str, int]:
    """Exact tokens per prompt section (system, template, history, state, candidates): what usage can later be
    broken down by. `system` is the system prompt and `template` the rendered template's instruction text;
    `candidate_tokens`, when the caller counted them already, are not encoded again."""
    def n(text: str) -> int:
        return tokens.count(text, model)

    return {
        "system": n(system),
        "template": n(template),
        "history": sum(n(line) for line in history_lines(request)),
        "state": n(state_text(request.state)),
        "candidates": sum(candidate_tokens if candidate_tokens is not None else map(n, (c.text for c in request.candidates))),
    }
