from pathlib import Path

import numpy as np
import pytest

from streams.cache import calibration
from streams.cache.calibration import Pair, ThresholdStore, metrics, pick_threshold, read_pairs, stsb_pairs
from streams.cache.embedders import HashingEmbedder, load_embedder

QUESTION_PAIRS = Path(__file__).with_name("question_pairs.jsonl")


def test_metrics():
    hits = np.array([True, True, False, False])
    labels = np.array([1, 0, 1, 0])
    assert metrics(hits, labels) == {"precision": 0.5, "recall": 0.5, "hit_rate": 0.5, "pairs": 4, "hits": 2,
                                     "false_hits": 1}


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
    pairs = [Pair("How do I gain weight?", "How do I lose weight?", 0),
             Pair("How do I get rid of acne?", "How can I get rid of acne?", 1)]
    rows = calibration.decide(HashingEmbedder(), pairs, threshold=0.5)
    assert [r["hit"] for r in rows] == [False, True]
    assert rows[0]["refused"] == "antonym" and all(r["latency_ms"] > 0 for r in rows)
    assert calibration.summarize(rows)["precision"] == 1.0


def test_unknown_embedder_names_the_choices():
    with pytest.raises(ValueError, match="auto, minilm, hashing"):
        load_embedder("bert")


def test_embedders_return_unit_rows(embedder):
    rows = embedder.embed(["How do I pay?", "hello", ""])
    assert rows.shape == (3, embedder.dim)
    assert np.allclose(np.linalg.norm(rows[:2], axis=1), 1.0, atol=1e-5)
    assert float(rows[0] @ embedder.embed(["how do I pay"])[0]) > 0.8
