"""Read JSON Lines: one field of each line, addressed by a dotted path (numeric parts index lists)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import orjson


def get_path(obj: Any, dotted: str) -> Any:
    """`choices.0.turns.0.content` → obj["choices"][0]["turns"][0]["content"]; KeyError names the missing part."""
    for part in dotted.split("."):
        if isinstance(obj, list) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(obj) <= index < len(obj):
                raise KeyError(f"{dotted}: index {part} out of range (list of {len(obj)})")
            obj = obj[index]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            raise KeyError(f"{dotted}: no {part!r} in {type(obj).__name__}")
    return obj


def iter_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, line) for the non-blank lines of `path` ('-' = stdin)."""
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for number, line in enumerate(stream, 1):
            if line.strip():
                yield number, line
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def iter_field(path: str, dotted: str) -> Iterator[Any]:
    """The value at `dotted` in each JSON line of `path` ('-' = stdin); a bad line raises ValueError with its number."""
    for number, line in iter_lines(path):
        try:
            yield get_path(orjson.loads(line), dotted)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
        except KeyError as exc:
            raise ValueError(f"{path}:{number}: {exc.args[0]}") from None
