"""A hostile producer's requests: a repeated key cannot flip a request's tenant, an unknown or empty tenant is
rejected unless JEV_TENANTS admits any, control characters never reach ids and labels, a rejection carries the
request_id whenever it was readable, and each rejection names the real fault."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from schemas.records import Rejection, Work
from streams.core.tenants import admitted as admitted_tenants
from streams.ingest.decode import Admission, admit
from streams.settings import load

TENANTS = admitted_tenants("acme, globex")
POLICY = Admission(1_048_576, "gpt-4o-mini", frozenset({"ranking"}), tenants=TENANTS)
GOOD = {"request_id": "r-1", "tenant": "acme", "service": "search", "decision_type": "ranking", "state": "s"}


def raw(**changes) -> bytes:
    return orjson.dumps({**GOOD, **changes})


def test_a_repeated_key_is_rejected_not_resolved_to_its_last_value():
    flipped = raw()[:-1] + b',"tenant":"globex"}'
    r = admit(flipped, POLICY)
    assert isinstance(r, Rejection) and r.reason == "duplicate_key" and "'tenant'" in r.detail
    assert r.request_id == "r-1"
    nested = raw(state={"a": 1})[:-2] + b',"a":2}}'
    assert admit(nested, POLICY).reason == "duplicate_key"


def test_text_that_only_looks_like_keys_is_no_duplicate():
    r = admit(raw(state='"tenant": "x", "tenant": "y"', user_id='a":b'), POLICY)
    assert isinstance(r, Work) and r.request.tenant == "acme"


@pytest.mark.parametrize(
    "tenant, reason", [("initech", "unknown_tenant"), ("", "missing_field"), ("  ", "missing_field")]
)
def test_unknown_and_empty_tenants_are_rejected(tenant, reason):
    r = admit(raw(tenant=tenant), POLICY)
    assert isinstance(r, Rejection) and r.reason == reason and r.request_id == "r-1"
    if reason == "unknown_tenant":
        assert "JEV_TENANTS" in r.detail


def test_jev_tenants_star_admits_any_named_tenant():
    assert admitted_tenants(load({}).tenants) is None
    anyone = Admission(1_048_576, "gpt-4o-mini", frozenset({"ranking"}), tenants=admitted_tenants("*"))
    assert isinstance(admit(raw(tenant="initech"), anyone), Work)
    assert admit(raw(tenant=""), anyone).reason == "missing_field"


def test_control_characters_are_stripped_from_labels():
    r = admit(raw(user_id="u\r\n-1", service="se\x00arch", business_event="e\x9b1"), POLICY)
    assert isinstance(r, Work)
    assert (r.request.user_id, r.request.service, r.request.business_event) == ("u-1", "search", "e1")


@pytest.mark.parametrize("request_id", ["r-\x001", "订单\x00-1", "r-\x07\x1b[2J1"])
def test_a_nul_inside_a_request_id_is_refused_not_stripped(request_id):
    """Stripped, the decision carried another id than the request (r-1 for r-\\x001): refused, naming the character."""
    r = admit(raw(request_id=request_id), POLICY)
    assert r.reason == "wrong_value" and r.request_id == request_id
    assert "U+0000" in r.detail or "U+0007" in r.detail
    assert "without control characters" in r.detail
    assert isinstance(admit(raw(request_id="订单-1"), POLICY), Work)


@pytest.mark.parametrize(
    "payload, reason",
    [
        (raw(deadline_ms="soon"), "wrong_type"),
        (raw(colour="red"), "unknown_field"),
        (raw()[:-1] + b',"deadline_ms": NaN}', "bad_number"),
        (raw()[:-1] + b',"note": "\xff"}', "bad_json"),
        (raw()[:-1] + b',"deadline_ms": }', "bad_json"),
    ],
)
def test_a_rejection_carries_the_readable_request_id_and_the_real_fault(payload, reason):
    r = admit(payload, POLICY)
    assert isinstance(r, Rejection) and r.reason == reason and r.request_id == "r-1"
    if reason == "bad_number":
        assert "UTF-8" not in r.detail and "NaN" in r.detail


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["request_id", "tenant", "service", "state", "decision_type"]), min_size=1, max_size=8))
def test_any_repeated_top_level_key_is_caught(keys):
    body = b"{" + b",".join(orjson.dumps(k) + b':"v"' for k in keys) + b"}"
    r = admit(body, POLICY)
    if len(set(keys)) < len(keys):
        assert r.reason == "duplicate_key"
    else:
        assert not isinstance(r, Rejection) or r.reason != "duplicate_key"
