from pathlib import Path

import orjson
import pytest

from streams.cache.verifier import FEATURES
from workers.cli.main import main

QUESTION_PAIRS = Path(__file__).parents[3] / "streams" / "cache" / "question_pairs.jsonl"


def read_rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def test_calibrate_then_evaluate_with_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("streams.cache.calibration.MIN_HITS", 5)
    assert (
        main(
            [
                "cache",
                "calibrate",
                "--pairs",
                str(QUESTION_PAIRS),
                "--target-precision",
                "0.95",
                "--embedder",
                "hashing",
                "--json",
            ]
        )
        == 0
    )
    saved = orjson.loads(capsys.readouterr().out.strip())
    assert saved["embedder"] == "hashing" and saved["precision"] >= 0.95
    assert orjson.loads((tmp_path / "cache_thresholds.json").read_bytes())["hashing"]["threshold"] == saved["threshold"]

    assert main(["cache", "evaluate", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--json"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    summary = lines[-1]
    assert len(lines) == 41 and summary["threshold"] == saved["threshold"]
    assert {"precision", "recall", "hit_rate", "pairs", "latency_p99_ms"} <= summary.keys()
    assert summary["pairs"] == 40 and summary["precision"] == saved["precision"]


def test_calibrate_then_evaluate_with_a_model_check(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("streams.cache.calibration.MIN_HITS", 5)
    args = ["--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--model-check", "minilm", "--json"]
    assert main(["cache", "calibrate", "--target-precision", "0.95", *args]) == 0
    saved = orjson.loads(capsys.readouterr().out.strip())
    assert saved["model_check"] == "minilm" and saved["precision"] >= 0.95
    stored = orjson.loads((tmp_path / "cache_thresholds.json").read_bytes())["hashing+minilm"]
    assert stored["check_threshold"] == saved["check_threshold"]

    assert main(["cache", "evaluate", *args]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    summary = lines[-1]
    assert (summary["threshold"], summary["check_threshold"]) == (saved["threshold"], saved["check_threshold"])
    assert summary["precision"] == saved["precision"] and summary["hits"] == saved["hits"]
    assert all("check_cosine" in r for r in lines[:-1] if r["hit"])


def test_evaluate_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    assert (
        main(["cache", "evaluate", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--threshold", "0.3"]) == 0
    )
    out = capsys.readouterr().out
    assert "precision" in out and "recall" in out


def test_calibrate_unreachable_precision_fails_with_advice(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "p.jsonl"
    pairs.write_text('{"text_a": "a b", "text_b": "a b", "label": 0}\n')
    assert main(["cache", "calibrate", "--pairs", str(pairs), "--embedder", "hashing"]) == 1
    assert "lower --target-precision" in capsys.readouterr().err


def test_pairs_from_stsb(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("JEV_SHARED_DATA", str(shared_data))
    out = tmp_path / "pairs.jsonl"
    assert main(["cache", "pairs", "--from-stsb", "--split", "dev", "--out", str(out)]) == 0
    rows = [orjson.loads(line) for line in out.read_text().splitlines()]
    assert rows and set(rows[0]) == {"text_a", "text_b", "label"}


def test_replay_prints_the_summary_keys_and_serves_nothing_without_evidence(tmp_path, monkeypatch, capsys):
    """40 pairs are far too few verdicts for a 5% bound at 0.9 confidence: the replay serves no L2 hit."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    assert main(["cache", "replay", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert {"pairs", "hits", "false_hits", "precision", "recall", "target_error"} <= summary.keys()
    assert summary["pairs"] == 40 and summary["target_error"] == 0.05
    assert (summary["hits"], summary["precision"], summary["recall"]) == (0, None, 0.0)
    assert summary["certification"]["first_test"] is None, "too few verdicts to test a threshold"
    assert main(["cache", "replay", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing"]) == 0
    said = capsys.readouterr().out
    assert "no threshold certified" in said and "too few to test one at 0.05" in said


@pytest.mark.parametrize(
    "asked,again",
    [
        ("How do I configure feature number {i} today?", "how do i configure feature number {i} today"),
        ("今天怎么设置第{i}号功能？", "今天怎么设置第{i}号功能"),
    ],
)
def test_replay_says_why_nothing_is_served_when_the_best_scored_verdicts_disagree_too_often(
    tmp_path, monkeypatch, capsys, asked, again
):
    """The same near-identical questions (English, Chinese), one pair in five labelled different: the verdicts at
    the top of the ranking disagree 20% of the time, the 5% bound is never certified, and the replay says how far
    off it is."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(
        b"".join(
            orjson.dumps({"text_a": asked.format(i=i), "text_b": again.format(i=i), "label": int(i % 5 != 0)}) + b"\n"
            for i in range(300)
        )
    )
    assert main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--promote-margin", "0"]) == 0
    said = capsys.readouterr().out.splitlines()[-1]
    assert said.startswith("no threshold certified: the ") and "raise --max-error" in said
    assert (
        main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--promote-margin", "0", "--json"])
        == 0
    )
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    first = summary["certification"]["first_test"]
    assert summary["hits"] == 0 and summary["final_threshold"] is None
    assert first["disagreements"] > first["allowed"] and f"hold {first['disagreements']} disagreements" in said


def test_replay_learns_and_serves_once_the_evidence_allows(tmp_path, monkeypatch, capsys):
    """Every pair a duplicate, asked in the same words up to case: the refused candidates' verdicts (all
    agreeing) soon pass the test, and the later questions are served, all right."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(
        b"".join(
            orjson.dumps(
                {
                    "text_a": f"How do I configure feature number {w} today?",
                    "text_b": f"how do i configure feature number {w} today",
                    "label": 1,
                }
            )
            + b"\n"
            for w in (
                "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma tau upsilon " * 20
            ).split()[:300]
        )
    )
    assert (
        main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--promote-margin", "0", "--json"])
        == 0
    )
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["hits"] > 0 and summary["false_hits"] == 0 and summary["precision"] == 1.0
    assert summary["promoted"] == summary["promotion_judgements"] == 0, "promotion off"
    assert summary["explore_verdicts"] >= 118 and summary["final_threshold"] is not None
    assert summary["hit_ratio"] == summary["hits"] / 300 and summary["per_request_error"] == 0.0
    asked, ratio, precision = summary["curve"][-1]
    assert asked == 300 and ratio == round(summary["hit_ratio"], 4) and precision == 1.0
    assert summary["curve"][0][1] == 0.0, "the first requests are misses while verdicts accumulate"


def test_replay_learns_and_serves_chinese_questions_within_the_bound(tmp_path, monkeypatch, capsys):
    """The same pooled decision on Chinese questions (character-bigram units): duplicates that differ in
    punctuation and a particle are served once the verdicts certify, different questions on the same products
    are not."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    products = [f"{s}{a}{b}" for s in "大中小" for a in "红橙黄绿青蓝紫黑白灰" for b in "笔本包杯伞灯表鞋帽椅"]
    rows = [{"text_a": f"请问{p}今天怎么退货？", "text_b": f"请问{p}今天怎么退货呢", "label": 1} for p in products]
    rows += [{"text_a": f"{p}的保修期是多久？", "text_b": f"{p}的保修期是三年吗？", "label": 0} for p in products[:40]]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["hits"] > 0 and summary["false_hits"] <= 0.05 * summary["hits"]
    assert summary["certifying_verdicts"] >= 118, "a 5% bound at 0.9 confidence takes 118 clean verdicts at least"


def test_replay_counts_a_hit_on_a_repeated_text_a_as_its_own_pairs(tmp_path, monkeypatch, capsys):
    """Quora repeats a question across pairs: one entry holds it, and a text_b hitting it hit its own text_a
    (up to case and spacing), whichever pair filled the entry."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron sigma tau upsilon " * 20).split()
    rows = []
    for w in words[:300]:
        rows.append(
            {"text_a": f"How do I configure feature {w} today?", "text_b": f"Where is feature {w} set?", "label": 0}
        )  # fills the entry first; its own text_b is another question
        rows.append(
            {
                "text_a": f"how do I configure  feature {w} today?",
                "text_b": f"how do i configure feature {w} today",
                "label": 1,
            }
        )
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["hits"] > 0 and summary["false_hits"] == 0 and summary["precision"] == 1.0


def test_replay_promotes_near_misses_judged_the_same_and_serves_their_repeats(tmp_path, monkeypatch, capsys):
    """Far too few pairs to certify anything: no hit through the learned threshold. A text_b whose candidate is
    its own text_a labelled 1 (the label stands in for the naive twin's judgement) becomes a key of that answer
    and its repeats are served through it, in English and Chinese; labelled 0, it is never promoted. A repeat
    that names another text_a is right by the pair that promoted it, and counted apart."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    same = [
        ("How do I reset the router?", "How can I reset the router?"),
        ("请问红笔今天怎么退货？", "请问红笔今天怎么退货呢"),
    ]
    different = [
        ("How do I buy the router?", "How do I return the router?"),
        ("请问蓝伞今天怎么退货？", "请问蓝伞今天怎么换货？"),
    ]
    rows = [{"text_a": a, "text_b": b, "label": 1} for a, b in same]
    rows += [{"text_a": a, "text_b": b, "label": 0} for a, b in different]
    rows += [{"text_a": a, "text_b": b.upper(), "label": 1} for a, b in same] * 2  # asked again (case is no change)
    rows += [{"text_a": a, "text_b": b, "label": 0} for a, b in different] * 2
    rows.append({"text_a": "Where do I buy a modem?", "text_b": same[0][1], "label": 0})  # Quora repeats a text_b
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert (
        main(
            [
                "cache",
                "replay",
                "--pairs",
                str(pairs),
                "--embedder",
                "hashing",
                "--floor",
                "0.3",
                "--promote-margin",
                "0.94",
                "--json",
            ]
        )
        == 0
    )  # the hashing embedder's cosines are low: a wide band
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["final_threshold"] is None, "nothing certified"
    assert summary["promote_margin"] == 0.94
    assert summary["promotion_judgements"] == 4, (
        "each pair judged once: a promoted key serves its repeats, and a disagreement vetoes its entry at that cosine"
    )
    assert summary["promoted"] == 2 and summary["promoted_hits"] == summary["hits"] == 5
    assert summary["promoted_false_hits"] == summary["false_hits"] == 0 and summary["precision"] == 1.0
    assert summary["promoted_strict_false_hits"] == 1, "right by the judged pair; its own pair names another text_a"


def test_train_verifier_saves_weights_that_replay_then_uses(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "train.jsonl"
    rows = []
    for w in "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda sigma tau omega".split():
        rows += [
            {"text_a": f"How do I reset the {w} router?", "text_b": f"how do I reset the {w} router", "label": 1},
            {"text_a": f"Where is the {w} warehouse?", "text_b": f"Who runs the {w} warehouse today?", "label": 0},
            {"text_a": f"如何重置{w}路由器？", "text_b": f"如何重置{w}路由器", "label": 1},
            {"text_a": f"{w}仓库在哪里？", "text_b": f"今天谁管理{w}仓库？", "label": 0},
        ]
    pairs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows + read_rows(QUESTION_PAIRS)))
    assert main(["cache", "train-verifier", str(pairs), "--embedder", "hashing", "--floor", "0.2", "--json"]) == 0
    trained = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert trained["decision"] == "hashing" and trained["candidates"] > 0 and len(trained["weights"]) == len(FEATURES)
    assert (tmp_path / "verifier.json").exists() and trained["calibration_candidates"] > 0
    certifies = trained["certifies"]
    assert set(certifies) == {"0.05", "0.1", "0.2"}, "the configured bound (JEV_CACHE_MAX_ERROR) among them"
    assert all(0 <= c["errors"] <= c["served"] <= trained["calibration_candidates"] for c in certifies.values())
    assert main(["cache", "replay", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--json"]) == 0
    replayed = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert replayed["verifier"] == "trained:hashing"
    assert replayed["calibration_verdicts"] == trained["calibration_candidates"], "the held half opens the test"


def test_train_verifier_on_too_few_pairs_names_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(orjson.dumps({"text_a": "How do I reset it?", "text_b": "How to reset it?", "label": 1}) + b"\n")
    assert main(["cache", "train-verifier", str(pairs), "--embedder", "hashing", "--floor", "0.2"]) == 1
    assert "give more labelled pairs" in capsys.readouterr().err


def test_replay_leaves_exact_repeats_to_l1(tmp_path, monkeypatch, capsys):
    """A text_b equal to a cached text_a up to spacing is an L1 hit in the live pipeline: not an L2 hit."""
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"text_a": f"What is feature {w}?", "text_b": f"What  is feature {w}? ", "label": 1} for w in "abcde"]
    rows.append({"text_a": "How do I reset a router?", "text_b": "How can I reset my router?", "label": 1})
    pairs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    assert main(["cache", "replay", "--pairs", str(pairs), "--embedder", "hashing", "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out.splitlines()[-1])
    assert (summary["pairs"], summary["exact_hits"], summary["hits"]) == (6, 5, 0)


def test_replay_rejects_a_bad_shadow_rate(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path))
    assert main(["cache", "replay", "--pairs", str(QUESTION_PAIRS), "--embedder", "hashing", "--shadow-rate", "2"]) == 1
    assert "shadow rate must be in [0, 1]" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["calibrate", "evaluate", "replay", "train-verifier"])
def test_embedder_help_names_every_embedder(command, capsys):
    """by-language (minilm for English, e5 for Chinese) is accepted, so --help must offer it."""
    with pytest.raises(SystemExit):
        main(["cache", command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(name in text for name in ("auto", "minilm", "e5", "by-language", "hashing"))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_reworded_traffic_is_deterministic_half_reworded_and_its_slices_disjoint(tmp_path, shared_data, lang):
    files = {}
    for name, part, seed in (("a", "tune", 1), ("b", "tune", 1), ("held", "heldout", 1)):
        out = tmp_path / f"{name}.jsonl"
        args = ["cache", "reworded", "--lang", lang, "--slice", part, "--items", "40", "--seed", str(seed)]
        assert main([*args, "--shared", str(shared_data), "--out", str(out)]) == 0
        files[name] = out
    assert files["a"].read_bytes() == files["b"].read_bytes(), "the same seed writes the same file"
    rows = read_rows(files["a"])
    assert len(rows) == 80 and sum(r["rewords"] for r in rows) == 40
    firsts = {}
    for r in rows:
        key = tuple(c["id"] for c in r["candidates"])
        assert len(key) == 5
        if r["rewords"]:
            assert key in firsts and firsts[key] != r["state"], "a rewording follows its first, same candidates"
        else:
            firsts[key] = r["state"]
    if lang == "zh":
        assert all(any("\u4e00" <= ch <= "\u9fff" for ch in r["state"]) for r in rows)
    held = {r["state"] for r in read_rows(files["held"]) if not r["rewords"]}
    assert held and not held & set(firsts.values()), "no first question is in both slices"


def test_reworded_names_the_fix_for_missing_shared_data(tmp_path, capsys):
    args = ["cache", "reworded", "--lang", "en", "--slice", "tune", "--shared", str(tmp_path / "none")]
    assert main([*args, "--out", str(tmp_path / "out.jsonl")]) == 1
    assert "JEV_SHARED_DATA" in capsys.readouterr().err


REPLAY_KEYS = {
    "requests",
    "hits",
    "wrong_hits",
    "hit_ratio",
    "agreement",
    "agreement_lower",
    "first_hit_at",
    "tokens_saved",
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_replay_decisions_judges_hits_by_the_naive_decision(tmp_path, shared_data, monkeypatch, capsys, lang):
    """Built traffic (extra fields: a pair label, rewords, language) replayed through the stage's L2: the summary's
    figures agree with one another, and a repeat of a request word for word is L1's, counted apart."""
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path / "jev"))
    traffic = tmp_path / "traffic.jsonl"
    args = ["--lang", lang, "--slice", "tune", "--items", "30", "--shared", str(shared_data)]
    assert main(["cache", "reworded", *args, "--out", str(traffic)]) == 0
    rows = read_rows(traffic)
    rows.append({**rows[0], "request_id": "again"})  # the first request once more, word for word
    traffic.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    assert main(["cache", "replay", "--decisions", str(traffic), "--embedder", "by-language", "--json"]) == 0
    summary = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert REPLAY_KEYS <= summary.keys()
    assert summary["requests"] == 61 and summary["exact_hits"] == 1
    assert summary["hit_ratio"] == pytest.approx(summary["hits"] / 61)
    if summary["hits"]:
        assert summary["agreement"] == pytest.approx(1 - summary["wrong_hits"] / summary["hits"])
        assert 0 <= summary["agreement_lower"] <= summary["agreement"]
        assert 0 <= summary["first_hit_at"] < 61 and summary["tokens_saved"] > 0
    else:
        assert summary["agreement"] is None and summary["first_hit_at"] is None and summary["tokens_saved"] == 0


def test_replay_decisions_names_the_line_that_is_no_request(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JEV_DATA_DIR", str(tmp_path / "jev"))
    bad = tmp_path / "bad.jsonl"
    good = {"request_id": "r1", "tenant": "acme", "service": "faq", "decision_type": "x", "state": "hi"}
    bad.write_bytes(orjson.dumps(good) + b'\n{"oops"\n')
    assert main(["cache", "replay", "--decisions", str(bad), "--embedder", "hashing", "--json"]) == 1
    assert "line 2" in capsys.readouterr().err
