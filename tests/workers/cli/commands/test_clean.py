"""`jev clean FILE --field PATH --json`: the stage's cleanup over one field of each JSONL line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams import settings as settings_mod
from streams.text import tokens
from workers.cli.commands import clean as clean_cmd
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


LABELLED = Path(__file__).with_name("clean_labelled.jsonl")  # English and Chinese answers, fillers labelled by hand
LABEL_ARGS = ["--field", "answer", "--opening-field", "opening", "--closing-field", "closing"]


def test_labelled_answers_report_the_share_of_fillers_removed(capsys):
    lines = run_json(capsys, str(LABELLED), *LABEL_ARGS, "--model", "gpt-4o")
    summary, rows = lines[-1], [orjson.loads(x) for x in LABELLED.read_bytes().splitlines()]
    assert summary["openings"] == sum(bool(r["opening"]) for r in rows) > 0
    assert summary["closings"] == sum(bool(r["closing"]) for r in rows) > 0
    assert summary["openings_removed"] == 1.0 and summary["closings_removed"] == 1.0
    assert summary["numbers_lost"] == 0 and summary["content_lost"] == 0
    assert all(set(line["labels"]) >= {"content_lost"} for line in lines[:-1])


def test_labelled_table_output(capsys):
    assert main(["clean", str(LABELLED), *LABEL_ARGS]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "100.0% of 12 filler openings removed" in out and "0 texts lost content" in out


@pytest.mark.parametrize(
    "original, cleaned, labels, verdict",
    [
        (
            "好的！长城很长。希望对您有帮助！",
            "长城很长。",
            {"opening": "好的！", "closing": "希望对您有帮助！"},
            {"opening": True, "closing": True, "content_lost": False},
        ),
        # a filler removed in part is not removed
        (
            "好的，我来回答。长城很长。",
            "我来回答。长城很长。",
            {"opening": "好的，我来回答。"},
            {"opening": False, "content_lost": False},
        ),
        # a filler clause inside the closing sentence
        (
            "会费两百元。希望对你有用，截止日期是12月31日。",
            "会费两百元。截止日期是12月31日。",
            {"closing": "希望对你有用，"},
            {"closing": True, "content_lost": False},
        ),
        # removing more than the label loses content, and the filler does not count as removed
        (
            "Sure! Use a set. It is fast.",
            "It is fast.",
            {"opening": "Sure! "},
            {"opening": False, "content_lost": True},
        ),
        # case and spacing aside: "Sure, let's" → "Let's"
        (
            "Sure, let's add 2 and 2.",
            "Let's add 2 and 2.",
            {"opening": "Sure, "},
            {"opening": True, "content_lost": False},
        ),
        ("No filler here.", "No filler here.", {}, {"content_lost": False}),
        ("No filler here.", "No here.", {}, {"content_lost": True}),
    ],
)
def test_judge(original, cleaned, labels, verdict):
    assert clean_cmd.judge(original, cleaned, **labels) == verdict


def test_a_label_not_in_its_text_is_named(capsys, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(orjson.dumps({"answer": "长城很长。", "opening": "好的！", "closing": ""}) + b"\n")
    assert main(["clean", str(path), *LABEL_ARGS, "--json"]) == 2
    assert "the opening label '好的！' is not in the text" in capsys.readouterr().err


def test_held_out_chinese_answers(capsys, tmp_path):
    """The labelled slice bench/zh_clean_slice.py builds from zh-dev and ShareGPT: on its held-out half (never
    tuned on), at least 90% of filler openings and of closings go, no number is lost."""
    shared = Path(settings_mod.load().shared_data)
    if not (shared / "zh-dev" / "answers.jsonl").exists():
        pytest.skip(f"zh-dev answers not found under {shared}; set JEV_SHARED_DATA to the shared data folder")
    root = Path(__file__).resolve().parents[4]
    built = subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "zh_clean_slice.py"),
            "--out",
            str(tmp_path),
            "--shared-data",
            str(shared),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=root,
    )
    assert orjson.loads(built.stdout.splitlines()[-1])["heldout"]["openings"] > 40
    summary = run_json(capsys, str(tmp_path / "zh-clean-heldout.jsonl"), *LABEL_ARGS, "--model", "gpt-4o")[-1]
    assert summary["openings_removed"] >= 0.9 and summary["closings_removed"] >= 0.9
    assert summary["numbers_lost"] == 0
    assert summary["content_lost"] <= 1  # 你好，是英文 Hello 的中文说法: a greeting that is the sentence's subject
