import numpy as np
import pytest

from streams.cache.verifier import FEATURES, Verifier, features, fit, load_verifier, save_weights
from streams.cache.verify import differences


def test_fit_recovers_the_weights_of_a_logistic_truth():
    rng = np.random.default_rng(0)
    x = np.column_stack([np.ones(4000), rng.uniform(0.6, 1.0, 4000), rng.uniform(0, 1, 4000)])
    truth = np.array([-30.0, 35.0, -2.0])
    y = (rng.uniform(size=4000) < 1 / (1 + np.exp(-(x @ truth)))).astype(float)
    w = fit(x, y, np.zeros(3), ridge=1e-3)
    assert np.allclose(w, truth, rtol=0.25), w


def test_the_ridge_keeps_few_verdicts_near_the_starting_weights():
    prior = np.array([-20.0, 25.0])
    x = np.array([[1.0, 0.9], [1.0, 0.95]])
    w = fit(x, np.array([0.0, 0.0]), prior, ridge=10.0)
    assert np.abs(w - prior).max() < 2.0 and w[1] < prior[1], "two disagreements move it a little, downwards"


@pytest.mark.parametrize("query,cached,overlap,extra", [
    ("How do I learn Python quickly?", "How can I learn Python fast?", 2 / 4, 2.0),  # learn python shared
    ("如何快速学习Python？", "怎样快速学习Python？", 4 / 6, 2.0),  # python 快速 速学 学习 shared; 何快 样快 not (如何, 怎样: stop words)
    ("网络美女是什么意思", "网络红人是什么意思", 4 / 10, 6.0),  # one key term apart: 络美 美女 女是 vs 络红 红人 人是
    ("What does internet beauty mean?", "What does internet celebrity mean?", 2 / 4, 2.0),
])
def test_differences_count_word_units_in_english_and_chinese(query, cached, overlap, extra):
    diff = differences(query, cached)
    assert diff["overlap"] == pytest.approx(overlap) and diff["extra_words"] == extra
    assert 0 < diff["length_ratio"] <= 1


def test_feature_rows_mark_chinese_and_decide_requests():
    en = features("How do I reset my password?", "How can I reset my password?", 0.93, 0.5)
    zh = features("如何重置我的密码？", "怎么重置密码？", 0.91, 0.0, second=0.95, decide=True)
    assert len(en) == len(FEATURES) and dict(zip(FEATURES, zh))["han"] == 1.0 and dict(zip(FEATURES, en))["han"] == 0
    assert dict(zip(FEATURES, zh))["decide"] == 1.0 and dict(zip(FEATURES, zh))["second"] == 0.95
    assert dict(zip(FEATURES, en))["margin"] == pytest.approx(0.43)
    assert dict(zip(FEATURES, en))["second"] == 0.0, "no model check: no copy of the cosine to split its weight"


def test_trained_weights_are_preferred_to_shipped_and_unknown_decisions_fall_back_to_the_cosine(tmp_path):
    assert load_verifier("no-such-embedder", tmp_path).name == "cosine:no-such-embedder"
    weights = np.arange(len(FEATURES), dtype=float)
    save_weights(tmp_path, "minilm", weights, {"pairs": 3})
    loaded = load_verifier("minilm", tmp_path)
    assert loaded.name == "trained:minilm" and np.array_equal(loaded.weights, weights)
    with pytest.raises(ValueError, match="train-verifier"):
        Verifier(np.zeros(3))


def test_calibration_verdicts_are_saved_beside_the_weights(tmp_path):
    rows = np.random.default_rng(0).uniform(size=(5, len(FEATURES)))
    agreed = np.array([True, False, True, True, False])
    save_weights(tmp_path, "minilm", np.ones(len(FEATURES)), {"pairs": 5}, (rows, agreed))
    loaded = load_verifier("minilm", tmp_path)
    assert np.allclose(loaded.calibration[0], rows, atol=1e-4) and loaded.calibration[1].tolist() == agreed.tolist()
    save_weights(tmp_path, "e5", np.ones(len(FEATURES)), {"pairs": 0})
    assert len(load_verifier("e5", tmp_path).calibration[0]) == 0
