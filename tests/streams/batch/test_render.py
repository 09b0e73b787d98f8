import pytest

from schemas.batch import BatchMember
from streams.batch import config, render
from streams.text import tokens

MODEL = "gpt-4o-mini"
CFG = config.load()
TEMPLATE = CFG.template("weekly_report")
VARIABLES = {
    "department": "Platform R&D",
    "head": "Helga Braun",
    "budget": {"allocated_usd": 600000, "spent_usd": 260000},
    "projects": [
        {
            "name": f"Project {i}",
            "status": "on track",
            "budget_usd": 100000 + i,
            "technical_parameters": "LSM tree, 4 levels, bloom filter 10 bits/key, zstd level 3, p99 11 ms",
        }
        for i in range(4)
    ],
    "open_issues": [
        {"id": f"PLAT-{i}", "title": "Replication lag spikes under load", "severity": "high"} for i in range(4)
    ],
    "notes": "weekly sync held, nothing else to report",
}


def member(kind: str, quota: int, variables=None) -> BatchMember:
    return BatchMember(
        job="j", member="m1", kind=kind, template="weekly_report", quota_tokens=quota, variables=variables or VARIABLES
    )


def full_size(kind: str = "default") -> int:
    m = member(kind, 10_000)
    return tokens.count(render.block_text(m, VARIABLES, render.output_budget(TEMPLATE, 10_000)), MODEL)


def test_render_variables_lists_objects_one_line_each():
    text = render.render_variables({"a": 1, "tags": ["x", "y"], "items": [{"k": 1, "v": {"p": 2}}, {"k": 3}]})
    assert text.splitlines() == ["a: 1", "tags: x; y", "items:", "- k: 1 | v: p=2", "- k: 3"]


def test_render_variables_gives_dicts_of_objects_one_line_per_entry():
    text = render.render_variables(
        {
            "org": {"name": "Legal", "size": 4},
            "incidents": {"INC-7": {"sev": "P1", "what": "refunds"}, "INC-9": "closed"},
            "dept": {"portfolio": [{"program": "K8s"}]},
            "milestones": [["M1", "done"]],
        }
    )
    assert text.splitlines() == [
        "org: name=Legal, size=4",
        "incidents.INC-7: sev=P1, what=refunds",
        "incidents.INC-9: closed",
        "dept.portfolio:",
        "- program: K8s",
        "milestones: M1, done",
    ]


def test_member_within_quota_is_not_trimmed():
    block, size, trimmed = render.trim(member("rnd", 10_000), TEMPLATE, CFG.drops("rnd"), MODEL)
    assert trimmed == [] and size == tokens.count(block, MODEL) and "budget_usd" in block


@pytest.mark.parametrize(
    "kind, first_dropped, kept",
    [
        ("marketing", "technical_parameters", "budget_usd"),
        ("rnd", "budget", "technical_parameters"),
    ],
)
def test_kind_decides_what_goes_first(kind, first_dropped, kept):
    quota = full_size(kind) + render.output_budget(TEMPLATE, full_size(kind)) - 30
    block, size, trimmed = render.trim(member(kind, quota), TEMPLATE, CFG.drops(kind), MODEL)
    assert trimmed[0] == first_dropped
    assert f"{first_dropped}:" not in block and kept in block
    assert size + render.output_budget(TEMPLATE, quota) <= quota


@pytest.mark.parametrize("quota", [90, 150, 250, 400, 700])
@pytest.mark.parametrize("kind", ["marketing", "rnd", "default"])
def test_block_plus_answer_budget_fits_the_quota_and_keeps_essentials(kind, quota):
    block, size, trimmed = render.trim(member(kind, quota), TEMPLATE, CFG.drops(kind), MODEL)
    assert size == tokens.count(block, MODEL)
    assert size + render.output_budget(TEMPLATE, quota) <= quota
    assert block.startswith("### member m1 ")
    if "truncated" not in trimmed:
        assert "department: Platform R&D" in block and "name: Project 0" in block and "severity: high" in block
        assert not set(trimmed) & TEMPLATE.essential


def test_quota_too_small_is_an_error_naming_the_minimum():
    with pytest.raises(render.QuotaTooSmall, match="too small"):
        render.trim(member("rnd", 30), TEMPLATE, CFG.drops("rnd"), MODEL)


def test_list_tails_go_before_a_token_cut():
    quota = 200
    _, _, trimmed = render.trim(member("default", quota), TEMPLATE, ("notes",), MODEL)
    assert any(t.endswith("[-1]") for t in trimmed)


def test_merged_prompt_shares_instructions_once():
    blocks = [render.block_text(member("rnd", 400), {"department": f"D{i}"}, 100) for i in range(3)]
    merged = render.merged_prompt(TEMPLATE, blocks)
    assert merged.count(TEMPLATE.instructions) == 1 and merged.endswith(render.FOOTER)
    each = sum(render.individual_tokens(TEMPLATE, b, 100, MODEL) for b in blocks)
    assert tokens.count(merged, MODEL) + 300 < each


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"kinds": {}}, "expected templates"),
        ({"templates": {"t": {"instructions": "x", "sections": {}}}}, "at least one section"),
    ],
)
def test_bad_config_names_the_expected_shape(raw, message):
    with pytest.raises(ValueError, match=message):
        config.parse(raw)


def test_unknown_template_names_the_known_ones():
    with pytest.raises(KeyError, match="weekly_report"):
        CFG.template("nope")
