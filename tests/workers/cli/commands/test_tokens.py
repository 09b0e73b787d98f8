"""`jev tokens count`, `jev templates lint|render`, `jev plan` through the real CLI entry point."""

from pathlib import Path

import orjson
import pytest
import yaml

from streams import settings as settings_mod
from workers.cli.main import main

ARENA = Path(settings_mod.load().shared_data) / "arena-hard"


def json_lines(capsys):
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_tokens_count_plain_lines(tmp_path, capsys):
    path = tmp_path / "t.txt"
    path.write_text("hello world\n<|endoftext|>\n\nthree tokens here\n")
    assert main(["tokens", "count", "--model", "gpt-3.5-turbo", "--json", str(path)]) == 0
    assert json_lines(capsys) == [{"total": 2 + 7 + 3, "lines": [2, 7, 3]}]


def test_tokens_count_jsonl_field_with_list_index(tmp_path, capsys):
    path = tmp_path / "a.jsonl"
    path.write_text(
        '{"choices": [{"turns": [{"content": "hello world"}]}]}\n{"choices": [{"turns": [{"content": "hi"}]}]}\n'
    )
    assert (
        main(["tokens", "count", "--model", "gpt-4o", "--field", "choices.0.turns.0.content", "--json", str(path)]) == 0
    )
    assert json_lines(capsys) == [{"total": 3, "lines": [2, 1]}]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model", "llama-3"], "known model families"),
        (["--field", "choices.5.content"], "index 5 out of range"),
    ],
)
def test_tokens_count_errors(tmp_path, capsys, args, message):
    path = tmp_path / "a.jsonl"
    path.write_text('{"choices": [{"content": "x"}]}\n')
    assert main(["tokens", "count", *args, str(path)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(not ARENA.exists(), reason=f"Arena-Hard not found at {ARENA} (set JEV_SHARED_DATA)")
def test_tokens_count_equals_arena_hard_token_len(capsys):
    path = ARENA / "answers-gpt-3.5-turbo-0125.jsonl"
    assert (
        main(
            ["tokens", "count", "--model", "gpt-3.5-turbo", "--field", "choices.0.turns.0.content", "--json", str(path)]
        )
        == 0
    )
    out = json_lines(capsys)[0]
    expected = [orjson.loads(line)["choices"][0]["turns"][0]["token_len"] for line in path.open("rb")]
    assert out["lines"] == expected and out["total"] == sum(expected)


def test_templates_lint_bundled_is_clean(capsys):
    assert main(["templates", "lint", "--json"]) == 0
    rows = json_lines(capsys)
    assert rows[-1] == {"templates": 3, "flagged": 0}
    assert all(0 < r["instruction_tokens"] <= 300 for r in rows[:-1])


def test_templates_lint_flags_long_instructions_and_uncontracted_variables(tmp_path, capsys):
    doc = {
        "id": "chatty",
        "budget": 5000,
        "output": {"max_tokens": 10},
        "variables": {"state": {"max_tokens": 100}, "notes": {"required": False}},
        "sections": [
            {"name": "instruction", "instruction": True, "text": "Be careful and thorough. " * 80},
            {"name": "body", "text": "{{ state }} {{ notes }} {{ extra }}"},
        ],
    }
    (tmp_path / "chatty.yaml").write_text(yaml.safe_dump(doc))
    assert main(["templates", "lint", "--json", str(tmp_path)]) == 1
    row, summary = json_lines(capsys)
    assert summary == {"templates": 1, "flagged": 1}
    assert any("over 300" in p for p in row["problems"])
    assert any("'extra' has no contract" in p for p in row["problems"])
    assert any("'notes' has no max_tokens" in p for p in row["problems"])


def test_templates_render(tmp_path, capsys):
    variables = tmp_path / "v.json"
    variables.write_text(
        '{"state": {"amount": 90, "currency": "EUR"}, "candidates": [{"id": "allow", "text": "let it through"}]}'
    )
    assert main(["templates", "render", "risk_interception", "--vars", str(variables), "--json"]) == 0
    out = json_lines(capsys)[0]
    assert out["level"] == "full" and "- allow: let it through" in out["text"] and out["max_output_tokens"] == 8


def test_plan_json_summary_last(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "qps": 1800,
                "decision_types": {
                    "simple": {
                        "share": 0.6,
                        "context_tokens": 1800,
                        "candidates": 5,
                        "candidate_tokens": 200,
                        "iterations": 1,
                    },
                    "complex": {
                        "share": 0.4,
                        "context_tokens": 3000,
                        "candidates": 35,
                        "candidate_tokens": 200,
                        "iterations": 3,
                    },
                },
                "optimizations": {
                    "shared_context": True,
                    "cascade_top_k": 5,
                    "cache_hit_rate": 0.3,
                    "rules_share": 0.2,
                },
            },
            sort_keys=False,
        )
    )
    assert main(["plan", str(path), "--json"]) == 0
    *types, summary = json_lines(capsys)
    assert [t["decision_type"] for t in types] == ["simple", "complex"]
    assert summary["naive_tokens_per_decision"] == 145_080
    assert summary["decision_types"]["complex"]["naive_tokens_per_decision"] == 345_000
    assert {"naive_tokens_per_day", "optimized_tokens_per_decision", "optimized_tokens_per_day"} <= set(summary)


def test_plan_bad_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text("qps: -1\n")
    assert main(["plan", str(path)]) == 2
    assert "qps" in capsys.readouterr().err
