"""Usage events: the one place they are made. Keys, stacks and costs as the sink and the flame graphs read them."""

import pytest

from schemas.records import Request, UsageEvent
from streams.models import pricing
from streams.usage.events import event, usage_event

REQUEST = Request.from_data(
    {
        "request_id": "r1",
        "tenant": "acme",
        "service": "search",
        "decision_type": "ranking",
        "state": "x",
        "session_id": "s1",
        "business_event": "order",
    }
)


def test_an_event_round_trips_as_the_record_would_decode_it():
    made = usage_event(
        REQUEST,
        "score",
        section="fine",
        model="gpt-4o-mini",
        input_tokens=100,
        cache_read_tokens=40,
        output_tokens=3,
        nominal_tokens=900,
        beam=2,
        latency_ms=1.5,
    )
    assert made.to_representation() == UsageEvent.from_data(made.to_representation()).to_representation()
    assert (made.event_id, made.stack, made.session_id, made.business_event) == (
        "4:acme/2:r1:score:fine",
        "acme;search;ranking;score;fine",
        "s1",
        "order",
    )
    assert made.cost == pricing.cost("gpt-4o-mini", 100, 40, 3) > 0
    assert (made.iteration, made.candidates, made.outcome) == (0, 0, "ok"), "unset fields keep their defaults"


def test_a_stage_without_a_section_is_keyed_by_tenant_request_and_stage():
    assert usage_event(REQUEST, "ingest").event_id == "4:acme/2:r1:ingest"


def test_a_misspelt_field_is_an_error_not_a_silent_drop():
    with pytest.raises(TypeError, match="no field input_token"):
        event(
            {
                "request_id": "r",
                "ts": 0.0,
                "tenant": "t",
                "service": "s",
                "business_line": "",
                "session_id": "",
                "user_id": "",
                "decision_type": "d",
            },
            "ingest",
            input_token=5,
        )
