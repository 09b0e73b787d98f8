"""Every usage event is type-checked at decode: a record that would fail the ClickHouse insert is refused with
the field named."""

import math

import pytest

from streams.usage import decode, events
from streams.usage.decode import MAX_FUTURE_S, BadUsage, usage_event

NOW = 1.8e9
GOOD = {
    "event_id": "acme/r1:ingest",
    "request_id": "r1",
    "ts": NOW - 5,
    "tenant": "acme",
    "service": "shop",
    "business_line": "",
    "session_id": "s",
    "user_id": "u",
    "decision_type": "ranking",
    "stage": "ingest",
    "stack": "acme;shop;ranking;ingest",
    "input_tokens": 12,
    "latency_ms": 3,
}


def test_a_well_typed_event_decodes_with_floats_widened():
    event = usage_event(GOOD, NOW)
    assert event.input_tokens == 12 and event.latency_ms == 3.0 and isinstance(event.latency_ms, float)
    assert event.output_tokens == 0 and event.outcome == "ok"


def test_a_chinese_event_decodes():
    event = usage_event({**GOOD, "tenant": "阿里", "service": "客服", "stack": "阿里;客服;ranking;ingest"}, NOW)
    assert event.tenant == "阿里"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"input_tokens": "abc"}, "input_tokens"),
        ({"input_tokens": -1}, "input_tokens"),
        ({"output_tokens": 2**32}, "output_tokens"),
        ({"iteration": 70_000}, "iteration"),
        ({"candidates": True}, "candidates"),
        ({"input_tokens": 1.5}, "input_tokens"),
        ({"latency_ms": "fast"}, "latency_ms"),
        ({"latency_ms": math.nan}, "latency_ms"),
        ({"cost": -1e9}, "cost"),
        ({"tenant": ["acme"]}, "tenant"),
        ({"stack": "x" * 5000}, "stack"),
        ({"event_id": None}, "event_id"),
        ({"ts": "yesterday"}, "ts"),
        ({"ts": NOW + MAX_FUTURE_S + 60}, "ahead"),
        ({"ts": NOW - 8 * 86400}, "days old"),
    ],
)
def test_a_poisoned_field_is_refused_by_name(change, field):
    with pytest.raises(BadUsage, match=field):
        usage_event({**GOOD, **change}, NOW, window_days=7)


def test_not_an_object_is_refused():
    with pytest.raises(BadUsage, match="JSON object"):
        usage_event([1, 2], NOW)


def test_without_now_the_timestamp_window_is_not_applied():
    assert usage_event({**GOOD, "ts": 1.0}).ts == 1.0


@pytest.mark.parametrize(
    "who",
    [
        {"tenant": "acme", "service": "shop", "decision_type": "ranking"},
        {"tenant": "阿里", "service": "客服", "decision_type": "风控"},
    ],
)
def test_a_stage_event_decodes_to_the_fields_it_was_written_with(who):
    """A stage's event takes the fast path (every field plainly typed); the result equals the record written and
    what the field-by-field check makes of the same data."""
    request = {
        "request_id": "r1",
        "ts": NOW - 1,
        "session_id": "s",
        "user_id": "u",
        "business_line": "",
        "business_event": "",
        **who,
    }
    written = events.event(
        request, "cache", "cache_l1", model="gpt-4o-mini", nominal_tokens=812, latency_ms=0.4, candidates=5
    )
    data = written.to_representation()
    fields = {}
    assert decode._fast(data, fields)
    checked = {name: decode._checked(name, tp, data[name]) for name, tp, _ in decode.FIELDS}
    assert fields == checked == {name: getattr(written, name) for name, _, _ in decode.FIELDS}
    assert usage_event(data, NOW).to_representation() == data


@pytest.mark.parametrize("change", [{"input_tokens": 1.5}, {"input_tokens": True}, {"cost": math.inf}, {"model": None}])
def test_what_the_fast_path_leaves_goes_through_the_checks(change):
    assert not decode._fast({**GOOD, **change}, {})
