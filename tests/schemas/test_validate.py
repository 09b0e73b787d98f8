import orjson
import pytest

from schemas.jsonschema import document
from schemas.records import Request
from schemas.validate import Invalid, decode

GOOD = {
    "request_id": "r1",
    "tenant": "acme",
    "service": "search",
    "decision_type": "ranking",
    "state": "q",
    "history": [{"role": "user", "content": "hi", "ts": 1.5}],
    "candidates": [{"id": "a", "text": "x"}],
}


def test_good_request_decodes_with_nested_records():
    req = decode(orjson.dumps(GOOD), Request, 10_000)
    assert req.history[0].content == "hi"
    assert req.candidates[0].id == "a"
    assert req.contracts.max_output_tokens == 256


@pytest.mark.parametrize(
    "raw, reason, mentions",
    [
        (b"{not json", "bad_json", "JSON"),
        (b"\xff\xfe{}", "bad_json", "not valid UTF-8"),
        (b'{"request_id": "r", "deadline_ms": NaN}', "bad_number", "NaN and Infinity are not JSON numbers"),
        (b'{"request_id": "r", "deadline_ms": -Infinity}', "bad_number", "NaN and Infinity are not JSON numbers"),
        (b'{"request_id": "r", "tenant": "a", "tenant": "b"}', "duplicate_key", "'tenant' appears twice"),
        (b"[1, 2]", "wrong_type", "JSON object"),
        (orjson.dumps({k: v for k, v in GOOD.items() if k != "tenant"}), "missing_field", "tenant"),
        (orjson.dumps({**GOOD, "request_id": 7}), "wrong_type", "request_id"),
        (orjson.dumps({**GOOD, "history": [{"role": "user"}]}), "missing_field", "history[0].content"),
        (orjson.dumps({**GOOD, "candidates": "a,b"}), "wrong_type", "candidates"),
        (orjson.dumps({**GOOD, "colour": "red"}), "unknown_field", "colour"),
        (orjson.dumps({**GOOD, "deadline_ms": True}), "wrong_type", "deadline_ms"),
        (
            orjson.dumps({**GOOD, "history": [{"role": "user", "content": "你好", "ts": "昨天"}]}),
            "wrong_type",
            "history[0].ts: expected float, got str '昨天'",
        ),
        (
            orjson.dumps({**GOOD, "candidates": [{"id": "a", "text": "x"}, {"id": "b", "text": 5}]}),
            "wrong_type",
            "candidates[1].text: expected str, got int '5'",
        ),
        (orjson.dumps({**GOOD, "contracts": {"max_output_tokens": 1.5}}), "wrong_type", "contracts.max_output_tokens"),
        (
            orjson.dumps({**GOOD, "contracts": {"max_tokens": 5}}),
            "unknown_field",
            "contracts.max_tokens: unknown field",
        ),
        (
            orjson.dumps({**GOOD, "history": [{"role": "user", "content": "hi"}, "hello"]}),
            "wrong_type",
            "history[1]: expected a JSON object, got str",
        ),
    ],
)
def test_bad_input_names_the_problem(raw, reason, mentions):
    with pytest.raises(Invalid) as err:
        decode(raw, Request, 10_000)
    assert err.value.reason == reason
    assert mentions in str(err.value)


def test_oversized_payload_is_refused_before_parsing():
    with pytest.raises(Invalid) as err:
        decode(b"x" * 10_000_001, Request, 1_048_576)
    assert err.value.reason == "too_large"
    assert "JEV_MAX_RECORD_BYTES" in str(err.value)


def test_an_oversized_request_is_refused_with_its_request_id_where_it_can_be_read():
    big = b'{"request_id": "r-big", "tenant": "acme", "state": "' + b"x" * 2_000_000 + b'"}'
    with pytest.raises(Invalid) as err:
        decode(big, Request, 1_048_576)
    assert (err.value.reason, err.value.request_id) == ("too_large", "r-big")
    with pytest.raises(Invalid) as err:
        decode(b'{"state": "' + b"x" * 2_000_000 + b'"}', Request, 1_048_576)
    assert (err.value.reason, err.value.request_id) == ("too_large", "")


def test_json_schema_lists_required_fields_and_nested_types():
    schema = document(Request)
    assert set(schema["required"]) == {"request_id", "tenant", "service", "decision_type", "state"}
    turn = schema["properties"]["history"]["items"]
    assert turn["properties"]["ts"]["anyOf"][0] == {"type": "number"}
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize(
    "field, value, path",
    [
        ("state", "x" * 70_000, "state"),
        ("state", "长" * 30_000, "state"),  # 90,000 bytes in UTF-8 from 30,000 characters
        (
            "history",
            [{"role": "user", "content": "ok"}, {"role": "user", "content": "y" * 70_000}],
            "history[1].content",
        ),
    ],
)
def test_a_field_over_the_field_limit_is_too_large_and_named(field, value, path):
    raw = orjson.dumps(
        {
            "request_id": "r-big",
            "tenant": "acme",
            "service": "s",
            "decision_type": "ranking",
            "state": "s",
            field: value,
        }
    )
    with pytest.raises(Invalid) as err:
        decode(raw, Request, 1_048_576, max_field_bytes=65_536)
    assert err.value.reason == "too_large" and err.value.request_id == "r-big"
    assert path in str(err.value) and "JEV_MAX_FIELD_BYTES" in str(err.value)


def test_fields_under_the_limit_decode():
    raw = orjson.dumps(
        {"request_id": "r", "tenant": "acme", "service": "s", "decision_type": "ranking", "state": "中文" * 10_000}
    )
    assert decode(raw, Request, 1_048_576, max_field_bytes=65_536).state == "中文" * 10_000


def test_an_oversized_record_keeps_its_request_id():
    with pytest.raises(Invalid) as err:
        decode(b'{"request_id": "r-huge", "state": "' + b"x" * 2_000_000 + b'"}', Request, 1_048_576)
    assert err.value.reason == "too_large" and err.value.request_id == "r-huge"
