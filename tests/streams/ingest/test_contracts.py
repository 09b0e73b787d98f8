import pytest

from schemas.records import Contracts, Request, Turn
from streams.ingest import contracts as c
from streams.text import tokens
from streams.text.prompt import history_lines, measure_context, render_context


@pytest.mark.parametrize(
    "spec,expected",
    [
        (None, c.VariableContract()),
        ({"max_tokens": 50}, c.VariableContract(50, True)),
        ({"max_tokens": 5, "required": False, "key_fields": ["a"]}, c.VariableContract(5, False, ("a",))),
    ],
)
def test_parse_variable(spec, expected):
    assert c.parse_variable("v", spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        {"max_tokens": -1},
        {"max_tokens": 0},
        {"max_tokens": 10**9},
        {"max_tokens": "9"},
        {"max_tokens": True},
        {"max_tokn": 9},
        "text",
    ],
)
def test_bad_variable_contracts_are_errors(spec):
    with pytest.raises(c.ContractError) as err:
        c.parse_variable("v", spec)
    assert err.value.reason == "bad_contract" and "'v'" in str(err.value)


@pytest.mark.parametrize("spec", [{"max_tokens": 5, "min_tokens": 6}, {"min_tokens": 1}, {"max_tokens": 0}])
def test_bad_output_contracts_are_errors(spec):
    with pytest.raises(c.ContractError, match="output"):
        c.parse_output(spec)


CONTRACTS = {"state": c.VariableContract(10, True), "notes": c.VariableContract(3, False)}


@pytest.mark.parametrize(
    "values,reason",
    [
        ({"notes": "x"}, "missing_variable"),
        ({"state": ""}, "missing_variable"),
        ({"state": "word " * 11}, "over_contract"),
        ({"state": "ok", "notes": "one two three four"}, "over_contract"),
    ],
)
def test_check_variables_errors(values, reason):
    with pytest.raises(c.ContractError) as err:
        c.check_variables(CONTRACTS, values, "gpt-4o")
    assert err.value.reason == reason


def test_check_variables_counts_structured_values():
    counts = c.check_variables(CONTRACTS, {"state": {"b": 1, "a": 2}}, "gpt-4o")
    assert counts == {"state": tokens.count('{"a":2,"b":1}', "gpt-4o"), "notes": 0}


def req(max_input_tokens, history_len=10, **contracts):
    return Request(
        request_id="r",
        tenant="t",
        service="s",
        decision_type="d",
        state="stock 40 units",
        history=[Turn(role="user", content=f"message number {i} about stock") for i in range(history_len)],
        contracts=Contracts(max_input_tokens=max_input_tokens, **contracts),
    )


@pytest.mark.parametrize("limit", [6, 20, 40, 80, 10_000])
def test_fit_history_keeps_newest_turns_within_the_contract(limit):
    request = req(limit)
    first = c.fit_history(measure_context(request, "gpt-4o"))
    kept = history_lines(request)[first:]
    assert tokens.count(render_context(request, kept), "gpt-4o") <= limit
    if first > 0:
        assert tokens.count(render_context(request, history_lines(request)[first - 1 :]), "gpt-4o") > limit
    assert kept == [f"user: message number {i} about stock" for i in range(10 - len(kept), 10)]
    if limit == 10_000:
        assert first == 0


def test_fit_history_rejects_when_state_alone_is_over():
    with pytest.raises(c.ContractError, match="state alone"):
        c.fit_history(measure_context(req(2), "gpt-4o"))


@pytest.mark.parametrize("contracts", [dict(max_output_tokens=5, min_output_tokens=6), dict(max_output_tokens=-1)])
def test_check_request_rejects_nonsense(contracts):
    with pytest.raises(c.ContractError):
        c.check_request(req(100, **contracts))


def test_a_negative_deadline_is_rejected_with_the_fix():
    request = req(100)
    request.deadline_ms = -5
    with pytest.raises(c.ContractError, match="0 for no deadline") as err:
        c.check_request(request)
    assert err.value.reason == "bad_contract"
    request.deadline_ms = 0
    c.check_request(request)
