from dataclasses import replace

import pytest

from schemas.records import Candidate, Request, TemplateRef, Turn
from streams.ingest import templates as tpl
from streams.ingest.contracts import ContractError
from streams.text import tokens

MODEL = "gpt-4o"
BUNDLED = tpl.Templates.from_dir()


def inventory_vars(**kw):
    base = {
        "state": {
            "sku": "A1",
            "from_dc": "north",
            "to_dc": "south",
            "on_hand": 40,
            "days_of_cover": 9,
            "forecast_7d": 30,
            "supplier_notes": "late shipments in October " * 40,
        },
        "candidates": [{"id": "t1", "text": "move 20 units north → south"}, {"id": "t2", "text": "hold stock"}],
        "history": ["planner: south ran out last week"] * 15,
        "policy_notes": "freight is expensive on Fridays",
    }
    return base | kw


def test_bundled_templates_cover_the_demo_decision_types():
    assert {i for i, _ in BUNDLED.by_key} == {"inventory_transfer", "risk_interception", "ranking"}


def test_full_render_counts_every_section_exactly():
    r = tpl.render(BUNDLED.get("inventory_transfer"), inventory_vars(), MODEL)
    assert r.level == "full" and r.cut == []
    assert r.tokens == tokens.count(r.text, MODEL) <= 1500
    assert set(r.sections) == {"instruction", "state", "candidates", "policy_notes", "history"}
    assert r.sections["instruction"] == tokens.count(r.instruction, MODEL)
    assert (r.max_output_tokens, r.min_output_tokens) == (16, 1)


def budget_between(template, variables, step):
    """A budget that forces degradation to `step` of the ladder."""
    full = tpl.render(replace(template, budget=100_000), variables, MODEL)
    return {"dropped": full.tokens - full.sections["history"], "key_fields": full.sections["instruction"] + 60}[step]


@pytest.mark.parametrize(
    "level,cut_prefixes",
    [
        ("dropped", ["dropped section history"]),
        ("key_fields", ["dropped section history", "dropped section policy_notes", "kept key fields of state"]),
    ],
)
def test_degrade_ladder_records_what_was_cut(level, cut_prefixes):
    template = BUNDLED.get("inventory_transfer")
    budget = budget_between(template, inventory_vars(), level)
    r = tpl.render(replace(template, budget=budget), inventory_vars(), MODEL)
    assert r.level == level and r.tokens <= budget
    assert [cut.split(":")[0].split(" (")[0] for cut in r.cut] == cut_prefixes
    assert "supplier_notes" not in r.text if level == "key_fields" else "south ran out" not in r.text


def test_degrade_fails_clearly_when_nothing_fits():
    with pytest.raises(tpl.OverBudget, match="still over its budget of 20") as err:
        tpl.render(replace(BUNDLED.get("inventory_transfer"), budget=20), inventory_vars(), MODEL)
    assert err.value.reason == "over_budget"


def test_reject_policy_refuses_instead_of_cutting():
    template = replace(BUNDLED.get("risk_interception"), budget=60)
    variables = {
        "state": {"amount": 120, "currency": "EUR"},
        "candidates": [{"id": "allow", "text": "let it through"}],
        "history": ["card used in Lisbon 5 minutes ago"] * 3,
    }
    with pytest.raises(tpl.OverBudget, match="policy: degrade"):
        tpl.render(template, variables, MODEL)


@pytest.mark.parametrize(
    "variables,reason",
    [
        ({"candidates": [{"id": "a", "text": "x"}]}, "missing_variable"),
        ({"state": {"sku": "x " * 700}, "candidates": [{"id": "a", "text": "x"}]}, "over_contract"),
    ],
)
def test_bad_variables_are_clear_errors(variables, reason):
    with pytest.raises(ContractError) as err:
        tpl.render(BUNDLED.get("inventory_transfer"), variables, MODEL)
    assert err.value.reason == reason


def test_render_request_uses_request_fields_and_template_variables():
    request = Request(
        request_id="r1",
        tenant="shop",
        service="search",
        decision_type="ranking",
        state={"query": "red shoes", "locale": "en-US", "segment": "runner"},
        history=[Turn(role="user", content="no sandals please")],
        candidates=[Candidate(id="p1", text="red trail runners"), Candidate(id="p2", text="sandals")],
        template=TemplateRef(id="ranking", version="1", variables={"top_n": 1}),
    )
    r = BUNDLED.render_request(request, MODEL)
    assert "top 1 candidate ids" in r.text and "- p2: sandals" in r.text and "user: no sandals please" in r.text


def test_unknown_template_lists_known():
    with pytest.raises(ContractError, match="known: inventory_transfer v1"):
        BUNDLED.get("nope", "1")


@pytest.mark.parametrize(
    "doc,match",
    [
        (
            {
                "id": "x",
                "budget": 10,
                "policy": "shrug",
                "output": {"max_tokens": 1},
                "sections": [{"name": "a", "text": "a"}],
            },
            "policy",
        ),
        ({"id": "x", "budget": -5, "output": {"max_tokens": 1}, "sections": [{"name": "a", "text": "a"}]}, "budget"),
        (
            {"id": "x", "budget": 10, "output": {"max_tokens": 1}, "sections": [{"name": "a", "text": "{% if %}"}]},
            "Expected an expression",
        ),
        (
            {
                "id": "x",
                "budget": 10,
                "output": {"max_tokens": 1},
                "sections": [{"name": "a", "text": "a"}, {"name": "a", "text": "b"}],
            },
            "unique",
        ),
    ],
)
def test_bad_templates_fail_at_load(tmp_path, doc, match):
    import yaml

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ContractError, match=match):
        tpl.load(path)


def test_undeclared_variable_is_a_clear_error_at_render():
    template = tpl.parse(
        {"id": "x", "budget": 100, "output": {"max_tokens": 1}, "sections": [{"name": "a", "text": "Hello {{ who }}"}]}
    )
    assert tpl.referenced_variables(template) == {"who"}
    with pytest.raises(ContractError, match="'who' is undefined"):
        tpl.render(template, {}, MODEL)
