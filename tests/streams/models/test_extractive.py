from streams.models.extractive import ExtractiveGenerator
from streams.text import tokens

MODEL = "gpt-4o-mini"
PROMPT = """Write reports.
Sections:
- Summary: project progress, status
- Risks: open issues and their severity
### member ops (kind operations, answer within 40 tokens)
projects:
- name: CRM migration | status: late
open_issues:
- id: OPS-1 | title: login outage | severity: high
### member hr (kind default, answer within 30 tokens)
- name: Hiring | status: on track
### end
"""


def test_extractive_answers_every_member_in_the_layout_within_budget():
    out = ExtractiveGenerator(MODEL).generate(PROMPT, 200)
    assert out.label == "extractive" and out.model == "extractive"
    parts = out.text.split("=== hr ===")
    assert parts[0].startswith("=== ops ===\nSummary: projects: name: CRM migration")
    assert "Risks: open_issues: id: OPS-1" in parts[0]
    assert tokens.count(parts[0], MODEL) <= 40 + 2 and "Summary: " in parts[1]
    assert out.output_tokens == tokens.count(out.text, MODEL) and out.input_tokens == tokens.count(PROMPT, MODEL)


def test_extractive_is_deterministic_and_respects_max_tokens():
    gen = ExtractiveGenerator(MODEL)
    assert gen.generate(PROMPT, 200).text == gen.generate(PROMPT, 200).text
    assert gen.generate(PROMPT, 12).output_tokens <= 12


SECTIONS = (
    "Sections:\n- Summary: project progress, status and milestones reached\n"
    "- Risks: open issues blockers incidents and their severity\n"
    "- Next steps: planned work, owners, due dates and decisions needed\n"
)


def answer_for(body: str, budget: int = 120) -> dict[str, str]:
    prompt = f"{SECTIONS}### member m (kind x, answer within {budget} tokens)\n{body}\n### end\n"
    text = ExtractiveGenerator(MODEL).generate(prompt, budget).text
    assert "===" not in text  # a prompt for one member is answered without the member line
    return dict(line.split(": ", 1) for line in text.splitlines())


def test_facts_go_to_the_section_their_field_names_fit():
    got = answer_for(
        "team: Support\nhighlights: Closed 1,184 tickets\nblockers: MFA rollout paused\n"
        "upcoming: Order 60 hardware keys by 19 Apr"
    )
    assert "Closed 1,184 tickets" in got["Summary"] and "team: Support" in got["Summary"]
    assert got["Risks"] == "blockers: MFA rollout paused"
    assert got["Next steps"] == "upcoming: Order 60 hardware keys by 19 Apr"


def test_nested_records_and_string_lists_are_split_into_facts():
    got = answer_for(
        "incidents.INC-7: what=duplicate refunds, sev=P1\nplan: next=load test on 21 Apr, "
        "decision_needed=approve second bank\nshipped: iOS 5.12; Android 3.1"
    )
    assert got["Risks"] == "incidents.INC-7: what=duplicate refunds, sev=P1"  # a record stays whole
    assert got["Next steps"] == "plan: next=load test on 21 Apr; decision_needed=approve second bank"
    assert got["Summary"] == "shipped: iOS 5.12; Android 3.1"  # the field name once for its items


def test_a_section_no_fact_fits_says_so_instead_of_borrowing_an_unrelated_one():
    got = answer_for("department: Data Science\nshipped: Forecast model v4")
    assert got["Risks"] == got["Next steps"] == "none reported"


def test_a_long_fact_is_cut_at_a_field_boundary_within_budget():
    body = "projects:\n- " + " | ".join(f"field{i}: Value number {i} of {i * 1000}" for i in range(40))
    got = answer_for(body, 60)
    kept = got["Summary"].removeprefix("projects: ").split(" | ")
    assert kept and all(part in body for part in kept)  # whole fields only, none split
    assert tokens.count("\n".join(f"{k}: {v}" for k, v in got.items()), MODEL) <= 60


def test_plain_prompt_gets_its_leading_text():
    out = ExtractiveGenerator(MODEL).generate("The order shipped late.\nCustomer asks for a refund.", 5)
    assert out.text.startswith("The order shipped") and out.output_tokens <= 5


STREAM_PROMPT = "\n".join(f"Line {i}: parcels to depot {i % 5} leave within {i} hours." for i in range(40))


def test_the_extractive_generator_streams_its_answer_in_word_pieces():
    gen = ExtractiveGenerator()
    streaming = gen.stream(STREAM_PROMPT, 100)
    pieces = list(streaming)
    assert len(pieces) > 5 and all(len(p.split()) <= 8 for p in pieces)
    assert "".join(pieces) == gen.generate(STREAM_PROMPT, 100).text
    assert (streaming.model, streaming.label, streaming.input_tokens) == (
        "extractive",
        "extractive",
        gen.generate(STREAM_PROMPT, 100).input_tokens,
    )
