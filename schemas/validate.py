"""Decode and validate input bytes into a record; every failure names the field and the fix."""
from __future__ import annotations

import functools
import typing
from typing import Any

import faust
import orjson


class Invalid(ValueError):
    """A record that cannot be accepted. `reason` is a stable code; str() says what to fix."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


@functools.lru_cache(maxsize=None)
def _shape(tp: Any) -> tuple:
    return typing.get_origin(tp), typing.get_args(tp)


def _check(value: Any, tp: Any, path: str) -> None:
    origin, args = _shape(tp)
    if tp is Any:
        return
    if origin is typing.Union:
        if value is None and type(None) in args:
            return
        return _check(value, next(a for a in args if a is not type(None)), path)
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp in (str, bool):
        ok = isinstance(value, tp)
    elif origin in (list, typing.List):
        if not isinstance(value, list):
            raise Invalid("wrong_type", f"{path}: expected a JSON array, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check(item, args[0], f"{path}[{i}]")
        return
    elif origin in (dict, typing.Dict):
        ok = isinstance(value, dict)
    elif isinstance(tp, type) and issubclass(tp, faust.Record):
        return check_fields(value, tp, f"{path}.")
    else:
        ok = True
    if not ok:
        raise Invalid("wrong_type", f"{path}: expected {getattr(tp, '__name__', tp)}, got "
                                    f"{type(value).__name__} {str(value)[:40]!r}")


def check_fields(data: Any, record: type[faust.Record], path: str = "") -> None:
    if not isinstance(data, dict):
        raise Invalid("wrong_type", f"{path or 'record'}: expected a JSON object, got {type(data).__name__}")
    fields = record._options.fields
    for name in fields:
        if name not in data and name not in record._options.defaults:
            raise Invalid("missing_field", f"{path}{name}: required field is missing "
                                           "(see `jev schema request`)")
    for name, value in data.items():
        if name not in fields:
            raise Invalid("unknown_field", f"{path}{name}: unknown field; known fields are {', '.join(fields)}")
        _check(value, fields[name], f"{path}{name}")


MAX_DEPTH = 64


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when JSON containers nest deeper than `limit` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return False


def decode(raw: bytes, record: type[faust.Record], max_bytes: int):
    """bytes → record, or Invalid with a reason code (too_large, bad_json, wrong_type, …)."""
    if len(raw) > max_bytes:
        raise Invalid("too_large", f"payload is {len(raw):,} bytes; the limit is {max_bytes:,} "
                                   f"(JEV_MAX_REQUEST_BYTES); shorten state/history or raise the limit")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Invalid("bad_json", f"not valid UTF-8 JSON: {exc}") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth_exceeds(data):  # fewer brackets cannot nest deeper
        raise Invalid("too_deep", f"JSON nests deeper than {MAX_DEPTH} levels; flatten the state")
    check_fields(data, record)
    return record.from_data(data)
