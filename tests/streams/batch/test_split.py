import json
from pathlib import Path

import pytest

from schemas.batch import BatchMember
from streams.batch import aggregate, config, render, report, split
from streams.models.extractive import ExtractiveGenerator
from streams.models.protocol import Generated
from streams.text import tokens

MODEL = "gpt-4o-mini"
CFG = config.load()
TEMPLATE = CFG.template("weekly_report")
SAMPLE = Path("streams/batch/sample_weekly_reports.jsonl")


def sample_members(n: int = 12) -> list[BatchMember]:
    return [BatchMember(**json.loads(line)) for line in SAMPLE.read_text().splitlines()[:n]]


class Failing:
    """A backend that errors (out of memory, timeout): members must fail explicitly, not vanish."""

    name, model, label = "failing", "failing", "llm"

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        raise RuntimeError("backend down")


class Rambling:
    """A model that ignores the layout: one paragraph, no member headers, no sections."""

    name, model, label = "rambling", "rambling", "llm"

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        return Generated("Sure! Here is a great report for everyone. " * 3, 10, 10, self.model, self.label)


def planned(n: int = 4):
    calls, failed = aggregate.plan(sample_members(n), CFG, MODEL)
    assert not failed and len(calls) == 1
    return calls[0]


def test_parse_answers_and_sections():
    text = "=== a ===\nSummary: fine\nRisks: none\nmore risk\n=== b ===\n**Summary**: ok\n=== a ===\nSummary: dup"
    answers = split.parse_answers(text)
    assert set(answers) == {"a", "b"} and answers["a"].startswith("Summary: fine")
    assert split.parse_sections(answers["a"], ["Summary", "Risks"]) == {"Summary": "fine", "Risks": "none more risk"}
    assert split.parse_sections(answers["b"], ["Summary", "Risks"]) == {"Summary": "ok"}


@pytest.mark.parametrize(
    "answer, expected",
    [
        (None, ["missing from the merged output"]),
        ("Summary: a\nRisks: b\nNext steps: c", []),
        ("Summary: a\nRisks: b", ["missing section Next steps"]),
        ("Summary: a\nRisks: \nNext steps: c", ["missing section Risks"]),
        ("Summary: " + "word " * 200 + "\nRisks: b\nNext steps: c", ["answer 212 tokens over its budget 120"]),
    ],
)
def test_contract_problems(answer, expected):
    assert split.problems(answer, TEMPLATE, 120, MODEL) == expected


@pytest.mark.parametrize("total, weights", [(10, [1, 1, 1]), (7, [0, 0]), (100, [5, 0, 3]), (0, [1, 2])])
def test_apportion_sums_exactly(total, weights):
    parts = split.apportion(total, weights)
    assert sum(parts) == total and len(parts) == len(weights)


def test_well_formed_merged_output_needs_no_retry():
    gen = ExtractiveGenerator(MODEL)
    call = aggregate.generate(planned(), gen, MODEL)
    results = split.split(call, TEMPLATE, gen, MODEL)
    assert [r.status for r in results] == ["ok"] * 4 and not any(r.retried for r in results)
    assert all(r.label == "extractive" and set(r.sections) == {"Summary", "Risks", "Next steps"} for r in results)
    assert sum(r.input_tokens for r in results) == call.prompt_tokens
    assert sum(r.output_tokens for r in results) == call.output_tokens
    assert all(r.quota_used <= r.quota_tokens for r in results)


def test_malformed_members_are_retried_alone():
    gen = ExtractiveGenerator(MODEL)
    call = aggregate.generate(planned(), gen, MODEL)
    answers = split.parse_answers(call.text)
    ids = list(answers)
    # member 0 lost its Risks line, member 1 is missing, member 2 is over budget; member 3 intact
    broken = [
        f"=== {ids[0]} ===\n"
        + "\n".join(line for line in answers[ids[0]].splitlines() if not line.startswith("Risks")),
        f"=== {ids[2]} ===\n" + answers[ids[2]] + "\n" + "filler " * 300,
        f"=== {ids[3]} ===\n" + answers[ids[3]],
    ]
    call.text, call.output_tokens = "\n".join(broken), tokens.count("\n".join(broken), MODEL)
    results = split.split(call, TEMPLATE, gen, MODEL)
    assert ids == ["m1", "m2", "m3", "m4"]  # answers are headed by the members' tags, results carry their ids
    assert [r.member for r in results] == [s.member.member for s in call.shares]
    assert [r.retried for r in results] == [True, True, True, False]
    assert all(r.status == "ok" for r in results)
    assert results[0].input_tokens > call.shares[0].block_tokens + 100  # the retry re-sent the instructions


def test_generator_down_gives_explicit_failures_for_everyone():
    call = aggregate.generate(planned(), Failing(), MODEL)
    assert call.error.startswith("RuntimeError")
    results = split.split(call, TEMPLATE, Failing(), MODEL)
    assert len(results) == 4 and all(r.status == "failed" and r.retried for r in results)
    assert all("backend down" in r.error for r in results)


def test_layout_ignored_fails_the_contract_after_one_retry():
    gen = Rambling()
    results = split.split(aggregate.generate(planned(2), gen, MODEL), TEMPLATE, gen, MODEL)
    assert all(r.status == "failed" and "missing section Summary" in r.error for r in results)


def test_unknown_template_and_tiny_quota_fail_explicitly():
    members = sample_members(3)
    members[0].quota_tokens = 20
    (call,), failed = aggregate.plan(members, CFG, MODEL)
    assert [f.member for f in failed] == [members[0].member] and "too small" in failed[0].error
    assert [s.member.member for s in call.shares] == [m.member for m in members[1:]]
    members[1].template = "nope"
    calls, failed = aggregate.plan([members[1]], CFG, MODEL)
    assert calls == [] and failed[0].status == "failed" and "unknown batch template" in failed[0].error


def test_group_by_job_and_template_in_chunks():
    members = sample_members(5)
    members[4].job = "other"
    groups = aggregate.group(members, 3)
    assert [[m.member for m in g] for g in groups] == [
        [m.member for m in members[:3]],
        [members[3].member],
        [members[4].member],
    ]


def test_sample_job_report_merged_beats_individual():
    gen = ExtractiveGenerator(MODEL)
    members = sample_members()
    assert len(members) >= 10 and len({m.kind for m in members}) >= 4
    (call,), failed = aggregate.plan(members, CFG, MODEL)
    results = failed + split.split(aggregate.generate(call, gen, MODEL), TEMPLATE, gen, MODEL)
    r = report.summarize("weekly", results, len(members), MODEL)
    assert r["results"] == r["members"] == 12 and r["failed"] == 0 and r["merged_calls"] == 1
    assert r["quota_violations"] == 0 and r["tokens_merged"] < r["tokens_individual"]
    assert r["cost_merged"] < r["cost_individual"]
    rnd = next(x for x in results if x.kind == "rnd")
    assert "budget_usd" in rnd.trimmed and "budget_usd" not in rnd.text


MIXED = Path("tests/streams/batch/jobs/mixed_shapes.jsonl")


def run_job(members: list[BatchMember], window: int = 16) -> list:
    gen, results = ExtractiveGenerator(MODEL), []
    for group in aggregate.group(members, window):
        calls, failed = aggregate.plan(group, CFG, MODEL)
        results += failed
        for call in calls:
            results += split.split(aggregate.generate(call, gen, MODEL), TEMPLATE, gen, MODEL)
    return results


def test_members_of_every_shape_fill_every_section_without_retry():
    """Projects with other field names, issues as plain strings, nested dicts, prose fields, string lists."""
    members = [BatchMember(**json.loads(line)) for line in MIXED.read_text().splitlines()]
    assert len(members) == 12
    results = run_job(members)
    r = report.summarize(members[0].job, results, len(members), MODEL)
    assert r["failed"] == 0 and r["retries"] == 0 and r["quota_violations"] == 0 and r["merged_calls"] == 1
    assert r["tokens_merged"] < r["tokens_individual"]
    for res in results:
        assert all(res.sections.get(name) for name, _ in TEMPLATE.sections), res.member
    by_member = {res.member: res.sections for res in results}
    assert "Printer vendor missed the 12 Apr proof deadline" in by_member["brand-studio"]["Risks"]
    assert "INC-4471" in by_member["payments-platform"]["Risks"]
    assert "Order 60 hardware keys by 19 Apr" in by_member["it-helpdesk"]["Next steps"]


def test_a_group_merging_would_not_pay_for_is_sent_individually_and_says_so():
    members = sample_members(3)
    results = run_job(members, window=1)  # windows of one member: nothing to share the instructions with
    r = report.summarize("weekly", results, 3, MODEL)
    assert r["failed"] == 0 and r["merged_calls"] == 0 and r["individual_calls"] == 3
    assert r["tokens_merged"] == r["tokens_individual"]  # never more than the members alone
    assert all(res.sent == "individual" and res.note.startswith("sent individually") for res in results)


def test_merging_that_costs_more_than_it_saves_is_not_done(monkeypatch):
    members = sample_members(2)
    # answer heads of a merged output longer than the instructions it shares
    monkeypatch.setattr(render, "answer_overhead", lambda tag, model: 400)
    calls, _ = aggregate.plan(members, CFG, MODEL)
    shares = [s for c in calls for s in c.shares]
    merged = aggregate.call(shares, TEMPLATE, MODEL)
    assert merged.prompt_tokens + merged.max_tokens >= sum(s.individual_tokens for s in shares)
    assert len(calls) == 2 and all(c.sent == "individual" and "would reserve" in c.note for c in calls)


def test_retries_count_in_the_members_tokens():
    call = aggregate.generate(planned(2), ExtractiveGenerator(MODEL), MODEL)
    call.text, call.output_tokens = "", 0  # the merged output came back empty: both members retried alone
    results = split.split(call, TEMPLATE, ExtractiveGenerator(MODEL), MODEL)
    assert all(r.status == "ok" and r.retried for r in results)
    for r, share in zip(results, call.shares):
        assert r.reserved_tokens > share.individual_tokens  # its share of the failed call, plus its own call


@pytest.mark.parametrize("quota", [40, 80, 400, 1000])
def test_every_shape_fits_any_workable_quota_without_retry(quota):
    members = [BatchMember(**{**json.loads(line), "quota_tokens": quota}) for line in MIXED.read_text().splitlines()]
    for window in (1, 12):
        results = run_job(members, window)
        r = report.summarize(members[0].job, results, len(members), MODEL)
        assert r["failed"] == r["retries"] == r["quota_violations"] == 0, [x.error for x in results if x.error]
        assert r["tokens_merged"] <= r["tokens_individual"]


def test_a_quota_whose_answer_cannot_hold_the_sections_fails_before_any_call():
    member = BatchMember(**{**json.loads(MIXED.read_text().splitlines()[0]), "quota_tokens": 36})
    calls, failed = aggregate.plan([member], CFG, MODEL)
    assert calls == [] and "one line per section of weekly_report needs at least" in failed[0].error


ODD = Path("tests/streams/batch/jobs/odd_shapes.jsonl")


def test_ids_and_prose_that_look_like_layout_cannot_break_it():
    """Ids with spaces, brackets, `=` and Chinese; prose with line breaks, `### ` and `=== x ===` lines;
    Chinese field names; empty lists. Every member gets its own answer from the merged call."""
    members = [BatchMember(**json.loads(line)) for line in ODD.read_text().splitlines()]
    results = run_job(members)
    r = report.summarize(members[0].job, results, len(members), MODEL)
    assert r["failed"] == r["retries"] == r["quota_violations"] == 0 and r["merged_calls"] == 1, r
    assert r["tokens_merged"] < r["tokens_individual"] and r["notes"] == []
    by_member = {res.member: res for res in results}
    assert "IOS-12" in by_member["Mobile Apps (iOS)"].text
    assert "MKT-9" in by_member["市场部"].text and "李娜" in by_member["市场部"].text
    assert "OPS-7" in by_member["ops = north"].text and "=== plan ===" not in by_member["ops = north"].text.splitlines()


def test_a_template_whose_merged_calls_need_retries_is_sent_individually_and_says_so():
    members = sample_members(4)
    rates = aggregate.RetryRate()
    rates.record(TEMPLATE.id, [True, True, True, False])  # 3 of 4 members of the last merged call retried
    calls, _ = aggregate.plan(members, CFG, MODEL, rates.rate(TEMPLATE.id))
    assert len(calls) == 4 and all(c.sent == "individual" and "75% of the members" in c.note for c in calls)
    calls, _ = aggregate.plan(members, CFG, MODEL, aggregate.RetryRate().rate(TEMPLATE.id))
    assert len(calls) == 1 and calls[0].sent == "merged"


def test_a_merged_call_whose_retries_cost_more_than_its_members_alone_says_so():
    gen = ExtractiveGenerator(MODEL)
    call = aggregate.generate(planned(4), gen, MODEL)
    call.text, call.output_tokens = "", 0  # nothing usable: every member retried alone
    results = split.split(call, TEMPLATE, gen, MODEL)
    r = report.summarize("weekly", results, 4, MODEL)
    assert r["failed"] == 0 and r["retries"] == 4 and r["tokens_merged"] > r["tokens_individual"]
    assert r["notes"] == [
        f"merged call and its 4 retries reserved {r['tokens_merged']} tokens, "
        f"its members alone {r['tokens_individual']}"
    ]


def test_the_w23_held_out_job_needs_no_retry_and_costs_less_merged():
    """Measured once as held out (jev batch submit ... --wait --json: 12 ok, 2,643 vs 3,882 tokens), kept here so
    it stays that way."""
    lines = Path("tests/streams/batch/jobs/heldout_w23.jsonl").read_text().splitlines()
    members = [BatchMember(**json.loads(line)) for line in lines]
    r = report.summarize(members[0].job, run_job(members), len(members), MODEL)
    assert r["ok"] == 12 and r["retries"] == r["quota_violations"] == 0
    assert r["tokens_merged"] < r["tokens_individual"]
