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


def count_sections(request: Request, model: str) -> dict[str, int]:
    """Exact tokens per prompt section: what usage can later be broken down by."""
    return {
        "history": sum(tokens.count(line, model) for line in history_lines(request)),
        "state": tokens.count(state_text(request.state), model),
        "candidates": sum(tokens.count(c.text, model) for c in request.candidates),
    }
