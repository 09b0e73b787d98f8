"""`jev distill FILE.jsonl --json`: one line per conversation, then the summary."""

import orjson
import pytest

from workers.cli.main import main

CONVERSATIONS = [
    {
        "messages": [
            {"role": "user", "content": "Hi!"},
            {"role": "assistant", "content": "Hello! How can I help?"},
            {"role": "user", "content": "I am so frustrated, this is terrible!! " * 6},
            {"role": "assistant", "content": "Sorry to hear that, I understand. " * 8},
            {"role": "user", "content": "How do I reset my password?"},
        ]
    },
    {"messages": [{"role": "user", "content": "Just one question: what is 2+2?"}]},
]


@pytest.fixture
def jsonl(tmp_path):
    path = tmp_path / "conversations.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(c) for c in CONVERSATIONS) + b"\n")
    return path


def test_json_lines_then_summary(jsonl, capsys):
    assert main(["distill", str(jsonl), "--json"]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 3
    first, single, summary = rows
    assert first["kept"] == [4] and first["tokens_after"] < first["tokens_before"]
    assert [d["reason"] for d in first["dropped"]] == ["semantic:chit-chat"] * 2 + ["semantic:venting"] * 2
    assert single["kept"] == [0] and single["tokens_after"] == single["tokens_before"]
    assert summary["conversations"] == 2 and summary["last_user_kept"] == 1.0 and summary["grew"] == 0
    assert summary["median_reduction"] == pytest.approx(
        (1 - first["tokens_after"] / first["tokens_before"]) / 2, abs=1e-4
    )


def test_layer_off_and_budget(jsonl, capsys):
    assert main(["distill", str(jsonl), "--json", "--off", "semantic", "--budget", "0"]) == 0
    first = orjson.loads(capsys.readouterr().out.splitlines()[0])
    assert first["dropped"] == [] and first["kept"] == [0, 1, 2, 3, 4]


def test_table_output(jsonl, capsys):
    assert main(["distill", str(jsonl)]) == 0
    assert "median reduction" in capsys.readouterr().out


def test_bad_line_names_the_fix(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"turns": []}\n')
    assert main(["distill", str(path), "--json"]) == 2
    assert "bad.jsonl:1: expected a JSON object" in capsys.readouterr().err
