"""A usage event checked at decode, before it can reach a ClickHouse insert.

Every field is checked against its declared type and column (UInt32 token counts, finite non-negative floats,
bounded strings) and `ts` against a window around now, since each day is a ClickHouse partition and an insert may
touch only so many. A record that fails raises BadUsage naming the field and what it should be; the caller
dead-letters it (`bad_usage_event`) and goes on with the rest.
"""

from __future__ import annotations

import math

from schemas.records import UsageEvent

UINT_MAX = {"iteration": 2**16 - 1, "nominal_tokens": 2**64 - 1}  # the rest of the int columns are UInt32
UINT32_MAX = 2**32 - 1
MAX_TEXT_CHARS = 4096  # ids, names and flame-graph stacks; nothing Jev writes comes near it
MAX_FUTURE_S = 3600.0  # an event stamped later than this ahead of now is refused (clock skew allowance)


class BadUsage(ValueError):
    """A usage event that would poison the sink's insert: the message says which field and why."""


def _fields() -> list[tuple[str, type, bool]]:
    defaults = UsageEvent._options.defaults
    return [(name, tp, name not in defaults) for name, tp in UsageEvent._options.fields.items()]


FIELDS = _fields()
MISSING = object()  # a required field's default: never of a field's type, so the checked path names it
_DEFAULTS = {name: MISSING if required else UsageEvent._options.defaults[name] for name, _, required in FIELDS}
STRINGS = [(name, _DEFAULTS[name]) for name, tp, _ in FIELDS if tp is str]
INTS = [(name, _DEFAULTS[name], UINT_MAX.get(name, UINT32_MAX)) for name, tp, _ in FIELDS if tp is int]
FLOATS = [(name, _DEFAULTS[name]) for name, tp, _ in FIELDS if tp is float]
EVALUATED = frozenset(name for name, _, _ in FIELDS)


def _checked(name: str, tp: type, value):
    if tp is str:
        if not isinstance(value, str):
            raise BadUsage(f"{name} must be a string, got {type(value).__name__} {str(value)[:40]!r}")
        if len(value) > MAX_TEXT_CHARS:
            raise BadUsage(f"{name} is {len(value):,} characters; at most {MAX_TEXT_CHARS:,}")
        return value
    if tp is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise BadUsage(f"{name} must be an integer, got {type(value).__name__} {str(value)[:40]!r}")
        top = UINT_MAX.get(name, UINT32_MAX)
        if not 0 <= value <= top:
            raise BadUsage(f"{name} must be between 0 and {top:,}, got {value:,}")
        return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise BadUsage(f"{name} must be a number, got {type(value).__name__} {str(value)[:40]!r}")
    if not math.isfinite(value) or value < 0:
        raise BadUsage(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def usage_event(data, now: float | None = None, window_days: int = 7) -> UsageEvent:
    """The UsageEvent of `data` (a decoded JSON value), every field checked; with `now`, `ts` must also lie
    between `window_days` days before it and MAX_FUTURE_S after. Raises BadUsage."""
    if not isinstance(data, dict):
        raise BadUsage(f"a usage event must be a JSON object, got {type(data).__name__}")
    record = UsageEvent.__new__(UsageEvent)
    fields = record.__dict__
    fields["__evaluated_fields__"] = EVALUATED
    if not _fast(data, fields):  # some field is not plainly well-typed: check each, naming the first that fails
        for name, tp, required in FIELDS:
            value = data.get(name)
            if value is None:
                if required:
                    raise BadUsage(f"{name} is required")
                value = UsageEvent._options.defaults[name]
            fields[name] = _checked(name, tp, value)
    if now is not None:
        ts = fields["ts"]
        if ts > now + MAX_FUTURE_S:
            raise BadUsage(f"ts {ts:.0f} is {ts - now:,.0f} s ahead of now; usage events are stamped when made")
        if ts < now - window_days * 86400:
            raise BadUsage(
                f"ts {ts:.0f} is {(now - ts) / 86400:,.1f} days old; the limit is {window_days} "
                f"(JEV_USAGE_TS_WINDOW_DAYS)"
            )
    return record


def _fast(data: dict, fields: dict) -> bool:
    """Fills `fields` from `data` when every field has exactly its type and lies in its column's range (what
    every stage writes), without a call per field: about 3x faster than _checked. False at the first field that
    does not (a missing required field, null, a bool, a float where an int goes, …): the caller checks them all."""
    get = data.get
    for name, default in STRINGS:
        value = get(name, default)
        if type(value) is not str or len(value) > MAX_TEXT_CHARS:
            return False
        fields[name] = value
    for name, default, top in INTS:
        value = get(name, default)
        if type(value) is not int or not 0 <= value <= top:
            return False
        fields[name] = value
    for name, default in FLOATS:
        value = get(name, default)
        if type(value) is int:
            value = float(value)
        elif type(value) is not float:
            return False
        if not 0.0 <= value < math.inf:  # NaN fails both comparisons
            return False
        fields[name] = value
    return True
