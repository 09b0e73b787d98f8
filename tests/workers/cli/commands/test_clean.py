"""`jev clean FILE --field PATH --json`: the stage's cleanup over one field of each JSONL line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams import settings as settings_mod
from streams.text import tokens
from workers.cli.main import main

ROWS = [
    {"id": 1, "choices": [{"turns": [{"content": "Sure! Paris is the capital of France.\n\nI hope this helps!"}]}]},
    {"id": 2, "choices": [{"turns": [{"content": "Use a set:\n\n```python\nseen = set()\n```"}]}]},
    {"id": 3, "choices": [{"turns": [{"content": "This text is strictly confidential. " * 30}]}]},
]


def run_json(capsys, *argv) -> list[dict]:
    assert main(["clean", *argv, "--json"]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture
def answers(tmp_path) -> Path:
    path = tmp_path / "answers.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in ROWS) + b"\n")
    return path


def test_one_line_per_text_then_a_summary(capsys, answers):
    lines = run_json(
        capsys, str(answers), "--field", "choices.0.turns.0.content", "--model", "gpt-4o", "--max-tokens", "40"
    )
    first, second, third, summary = lines
    assert first["text"] == "Paris is the capital of France." and first["removed"] == ["preamble", "closer"]
    assert first["tokens_before"] == tokens.count(ROWS[0]["choices"][0]["turns"][0]["content"], "gpt-4o")
    assert second["removed"] == [] and second["code_blocks"] == ["seen = set()"]
    assert third["flagged"] == ["strictly confidential"] and third["truncated"] and third["tokens_after"] <= 40
    assert set(first) >= {"tokens_before", "tokens_after", "removed", "flagged", "text", "code_blocks"}
    assert summary["texts"] == 3 and summary["changed_share"] == round(2 / 3, 4)
    assert summary["tokens_removed"] == sum(x["tokens_before"] - x["tokens_after"] for x in lines[:3])


@pytest.mark.parametrize(
    "field, message", [("choices.0.turns", "holds list, not text"), ("choices.5.turns", "index 5 out of range")]
)
def test_bad_field_names_the_problem(capsys, answers, field, message):
    assert main(["clean", str(answers), "--field", field, "--json"]) == 2
    assert message in capsys.readouterr().err


def test_table_output(capsys, answers):
    assert main(["clean", str(answers), "--field", "choices.0.turns.0.content"]) == 0
    out = capsys.readouterr().out
    assert "3 texts" in out and "preamble, closer" in out


def test_on_real_arena_answers(capsys):
    path = Path(settings_mod.load().shared_data) / "arena-hard" / "answers-gpt-4-0314.jsonl"
    if not path.exists():
        pytest.skip(f"Arena-Hard answers not found at {path}; set JEV_SHARED_DATA to the shared data folder")
    lines = run_json(capsys, str(path), "--field", "choices.0.turns.0.content", "--model", "gpt-4")
    summary = lines[-1]
    assert summary["texts"] == len(lines) - 1 == 500
    assert 0 < summary["tokens_removed"] < 0.05 * summary["tokens_before"]
    assert 0 < summary["changed_share"] < 0.5
    assert summary["dropped_content"] == 0  # no number or name taken out by cleanup
