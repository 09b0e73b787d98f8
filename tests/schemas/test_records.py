"""Record decoding: defaults are made afresh for each record, so no two records share a mutable default."""

from schemas.records import Contracts, Request, TemplateRef


def request(**fields) -> Request:
    return Request.from_data(
        {"request_id": "r-1", "tenant": "acme", "service": "search", "decision_type": "ranking", "state": "s", **fields}
    )


def test_defaults_are_filled_in_and_never_shared_between_records():
    first, second = request(), request()
    assert (first.history, first.candidates, first.contracts, first.kind) == ([], [], Contracts(), "decide")
    first.history.append("turn")
    first.contracts.max_output_tokens = 1
    first.candidates.append("candidate")
    third = request()
    assert (second.history, second.candidates, second.contracts.max_output_tokens) == ([], [], 256)
    assert (third.history, third.candidates, third.contracts.max_output_tokens) == ([], [], 256)
    assert Request._options.defaults["contracts"].max_output_tokens == 256


def test_a_dict_default_is_a_new_dict_for_each_record():
    first, second = TemplateRef.from_data({"id": "t"}), TemplateRef.from_data({"id": "t"})
    first.variables["k"] = "v"
    assert second.variables == {} and TemplateRef.from_data({"id": "t"}).variables == {}


def test_given_values_are_kept_and_nested_records_decoded():
    r = request(contracts={"max_output_tokens": 64}, candidates=[{"id": "a", "text": "保留库存"}])
    assert r.contracts.max_output_tokens == 64 and r.contracts.max_input_tokens == 8000
    assert r.candidates[0].text == "保留库存"


def test_a_nested_optional_record_spelled_x_or_none_encodes_and_decodes():
    """`decision: Decision | None` (the spelling pyupgrade writes) is a nested record like Optional[Decision]."""
    import orjson

    from schemas.records import Decision, Work

    work = Work.from_data(
        {
            "request": {"request_id": "r", "tenant": "a", "service": "s", "decision_type": "d", "state": "x"},
            "admitted_at": 0.0,
            "model": "m",
        }
    )
    work.decision = Decision(request_id="r", tier="llm", text="你好")
    back = Work.from_data(orjson.loads(orjson.dumps(work.to_representation())))
    assert isinstance(back.decision, Decision) and back.decision.text == "你好"
