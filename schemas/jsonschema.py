"""JSON Schema for input records, derived from the record fields (one source of truth)."""

from __future__ import annotations

import types
import typing
from typing import Any

import faust

PRIMITIVES = {str: "string", int: "integer", float: "number", bool: "boolean"}


UNIONS = (typing.Union, types.UnionType)  # Optional[X] and X | None (how annotations now spell it)


def _schema(tp: Any) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return {}
    if tp in PRIMITIVES:
        return {"type": PRIMITIVES[tp]}
    if origin in UNIONS:
        inner = [a for a in args if a is not type(None)]
        return {"anyOf": [_schema(a) for a in inner] + [{"type": "null"}]}
    if origin in (list, list):
        return {"type": "array", "items": _schema(args[0])}
    if origin in (dict, dict):
        return {"type": "object", "additionalProperties": _schema(args[1])}
    if isinstance(tp, type) and issubclass(tp, faust.Record):
        return record_schema(tp)
    raise TypeError(f"no JSON Schema for {tp!r}")


def record_schema(record: type[faust.Record]) -> dict:
    opts = record._options
    props = {name: _schema(tp) for name, tp in opts.fields.items()}
    required = [name for name in opts.fields if name not in opts.defaults]
    schema = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if record.__doc__:
        schema["description"] = record.__doc__.strip()
    return schema


def document(record: type[faust.Record]) -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": record.__name__,
        **record_schema(record),
    }
