"""Decode and validate input bytes into a record; every failure names the field and the fix."""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any

import faust
import orjson

from schemas.records import cached

UNIONS = (typing.Union, types.UnionType)  # Optional[X] and X | None (how annotations now spell it)


class Invalid(ValueError):
    """A record that cannot be accepted. `reason` is a stable code; str() says what to fix; `request_id` is the
    record's request_id where it could be read (so the rejection can be matched to the request)."""

    def __init__(self, reason: str, detail: str, request_id: str = ""):
        super().__init__(detail)
        self.reason, self.request_id = reason, request_id


KEY = re.compile(rb'"\s*:')  # matches after every key (and possibly inside strings): never fewer than the keys
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
REQUEST_ID = re.compile(rb'"request_id"\s*:\s*"((?:[^"\\\x00-\x1f]){1,200})"')
NON_NUMBERS = (b"NaN", b"Infinity", b"-Infinity", b"+Infinity", b"nan", b"inf", b"-inf")


Check = Callable[[Any, str], None]  # (value, its path) -> None, or Invalid naming the path
SCALARS: dict[Any, Callable[[Any], bool]] = {  # the JSON values each scalar field type accepts (a bool is no number)
    float: lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    int: lambda value: isinstance(value, int) and not isinstance(value, bool),
    str: lambda value: isinstance(value, str),
    bool: lambda value: isinstance(value, bool),
    dict: lambda value: isinstance(value, dict),
}


@cached
def _checker(tp: Any) -> Check | None:
    """The check of a value of type `tp`, built once per type (None: any value passes). Decoding runs one per field
    of every request, so the type's shape is read here, not per value."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return None
    if origin in UNIONS:
        inner, nullable = _checker(next(a for a in args if a is not type(None))), type(None) in args
        if inner is None or not nullable:
            return inner

        def optional(value: Any, path: str) -> None:
            if value is not None:
                inner(value, path)

        return optional
    if origin in (list, list):
        item = _checker(args[0])

        def array(value: Any, path: str) -> None:
            if not isinstance(value, list):
                raise Invalid("wrong_type", f"{path}: expected a JSON array, got {type(value).__name__}")
            if item is not None:
                for i, element in enumerate(value):
                    item(element, f"{path}[{i}]")

        return array
    if isinstance(tp, type) and issubclass(tp, faust.Record):
        fields = _fields_check(tp)
        return lambda value, path: fields(value, f"{path}.")
    accepts = SCALARS.get(dict if origin in (dict, dict) else tp)
    if accepts is None:
        return None

    def scalar(value: Any, path: str) -> None:
        if not accepts(value):
            raise Invalid(
                "wrong_type",
                f"{path}: expected {getattr(tp, '__name__', tp)}, got {type(value).__name__} {str(value)[:40]!r}",
            )

    return scalar


@cached
def _fields_check(record: type[faust.Record]) -> Check:
    """The check of a JSON object decoded as `record` (its path: the prefix of its fields' paths)."""
    fields = record._options.fields
    required = [name for name in fields if name not in record._options.defaults]
    checks = {name: _checker(tp) for name, tp in fields.items()}

    def check(data: Any, path: str) -> None:
        if not isinstance(data, dict):
            raise Invalid(
                "wrong_type", f"{path.rstrip('.') or 'record'}: expected a JSON object, got {type(data).__name__}"
            )
        for name in required:
            if name not in data:
                raise Invalid("missing_field", f"{path}{name}: required field is missing (see `jev schema request`)")
        for name, value in data.items():
            if name not in checks:
                raise Invalid("unknown_field", f"{path}{name}: unknown field; known fields are {', '.join(fields)}")
            if (field := checks[name]) is not None:
                field(value, f"{path}{name}")

    return check


def check_fields(data: Any, record: type[faust.Record], path: str = "") -> None:
    """Invalid naming the first field of `data` that `record` does not accept (missing, unknown, of a wrong type)."""
    _fields_check(record)(data, path)


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


def key_count(value: Any) -> int:
    """Keys of every JSON object in `value` (iteratively)."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += len(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def duplicate_key(raw: bytes, data: Any) -> str | None:
    """The first key that an object of `raw` holds twice, else None. A parser keeps the last value of a repeated
    key, so a request's tenant or request_id could flip unseen. Fast path: when the key-like matches in the bytes
    are no more than the parsed keys, no key repeats; else the standard parser confirms, pair by pair."""
    if len(KEY.findall(raw)) <= key_count(data):
        return None
    found: list[str] = []

    def pairs(items: list) -> dict:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys) and not found:
            found.append(next(k for i, k in enumerate(keys) if k in keys[:i]))
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs)
    return found[0] if found else None


def readable_request_id(raw: bytes) -> str:
    """The request_id of bytes that do not parse, where a plain `"request_id": "…"` can still be read."""
    m = REQUEST_ID.search(raw)
    return m.group(1).decode("utf-8", errors="replace") if m else ""


def json_fault(raw: bytes, exc: orjson.JSONDecodeError) -> Invalid:
    """The real fault of bytes orjson refused: not UTF-8, a NaN/Infinity (not JSON numbers), or a syntax error."""
    request_id = readable_request_id(raw)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return Invalid(
            "bad_json", f"not valid UTF-8 at byte {bad.start}: JSON is UTF-8; encode the request so", request_id
        )
    at = raw[exc.pos : exc.pos + 10] if exc.pos is not None else b""
    if at.lstrip(b" \t\r\n:,[").startswith(NON_NUMBERS):
        return Invalid(
            "bad_number",
            f"NaN and Infinity are not JSON numbers (at character {exc.pos}): send a finite number or null",
            request_id,
        )
    return Invalid("bad_json", f"not valid JSON: {exc}", request_id)


def strip_controls(data: dict, fields: tuple[str, ...]) -> None:
    """Remove control characters from the named top-level string fields (ids and labels that end up in keys,
    logs and ClickHouse columns, where they would break lines or terminals)."""
    for name in fields:
        if isinstance(data.get(name), str):
            data[name] = CONTROL.sub("", data[name])


def oversized_field(data: Any, max_bytes: int) -> tuple[str, int] | None:
    """(path, UTF-8 bytes) of the first string (key or value) in `data` longer than `max_bytes`, else None."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if len(item) * 4 > max_bytes and len(item.encode("utf-8", "surrogatepass")) > max_bytes:
                return path or "(the record)", len(item.encode("utf-8", "surrogatepass"))
        elif isinstance(item, dict):
            for key, value in item.items():
                stack.append((f"{path}.{key}" if path else str(key), key))
                stack.append((f"{path}.{key}" if path else str(key), value))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", value) for i, value in enumerate(item))
    return None


def decode(
    raw: bytes,
    record: type[faust.Record],
    max_bytes: int,
    clean: tuple[str, ...] = (),
    max_field_bytes: int | None = None,
):
    """bytes → record, or Invalid with a reason code (too_large, bad_json (syntax or not UTF-8), bad_number,
    duplicate_key, wrong_type, …) and the request_id when one was readable. `clean`: string fields stripped of control
    characters. `max_field_bytes`: the most UTF-8 bytes one string of the record may hold."""
    if len(raw) > max_bytes:
        raise Invalid(
            "too_large",
            f"payload is {len(raw):,} bytes; the limit is {max_bytes:,} "
            f"(JEV_MAX_RECORD_BYTES); shorten state/history or raise the limit",
            readable_request_id(raw[:65_536]),
        )
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise json_fault(raw, exc) from None
    request_id = data.get("request_id") if isinstance(data, dict) else None
    request_id = CONTROL.sub("", request_id) if isinstance(request_id, str) else ""
    if max_field_bytes is not None and len(raw) > max_field_bytes:
        field = oversized_field(data, max_field_bytes)
        if field is not None:
            raise Invalid(
                "too_large",
                f"{field[0]} is {field[1]:,} bytes; one field may hold {max_field_bytes:,} "
                f"(JEV_MAX_FIELD_BYTES); send a shorter one or raise the limit",
                request_id,
            )
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth_exceeds(data):  # fewer brackets cannot nest deeper
        raise Invalid("too_deep", f"JSON nests deeper than {MAX_DEPTH} levels; flatten the state", request_id)
    repeated = duplicate_key(raw, data)
    if repeated is not None:
        raise Invalid("duplicate_key", f"key {repeated!r} appears twice in one object; send each key once", request_id)
    try:
        check_fields(data, record)
    except Invalid as exc:
        exc.request_id = request_id
        raise
    strip_controls(data, clean)
    return record.from_data(data)
