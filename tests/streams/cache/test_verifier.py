import numpy as np
import pytest

from streams.cache.guards import differences
from streams.cache.verifier import FEATURES, Verifier, features, fit, load_verifier, save_verifier, standardizer


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


@pytest.mark.parametrize(
    "query,cached,overlap,extra",
    [
        ("How do I learn Python quickly?", "How can I learn Python fast?", 2 / 4, 2.0),  # learn python shared
        (
            "如何快速学习Python？",
            "怎样快速学习Python？",
            4 / 6,
            2.0,
        ),  # python 快速 速学 学习 shared; 何快 样快 not (如何, 怎样: stop words)
        (
            "网络美女是什么意思",
            "网络红人是什么意思",
            4 / 10,
            6.0,
        ),  # one key term apart: 络美 美女 女是 vs 络红 红人 人是
        ("What does internet beauty mean?", "What does internet celebrity mean?", 2 / 4, 2.0),
    ],
)
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
    assert dict(zip(FEATURES, en))["second"] == 0.93, "no model check: the primary cosine again"


def test_trained_weights_are_preferred_to_shipped_and_unknown_decisions_fall_back_to_the_cosine(tmp_path):
    assert load_verifier("no-such-embedder", tmp_path).name == "cosine:no-such-embedder"
    weights = np.arange(len(FEATURES), dtype=float)
    save_verifier(tmp_path, "minilm", Verifier(weights), {"pairs": 3})
    loaded = load_verifier("minilm", tmp_path)
    assert loaded.name == "trained:minilm" and np.array_equal(loaded.weights, weights)
    with pytest.raises(ValueError, match="train-verifier"):
        Verifier(np.zeros(3))


def test_calibration_verdicts_and_the_scale_are_saved_beside_the_weights(tmp_path):
    rows = np.random.default_rng(0).uniform(size=(5, len(FEATURES)))
    agreed = np.array([True, False, True, True, False])
    shift, spread = standardizer(rows)
    save_verifier(
        tmp_path,
        "minilm",
        Verifier(np.ones(len(FEATURES)), calibration=(rows, agreed), shift=shift, spread=spread),
        {"pairs": 5},
    )
    loaded = load_verifier("minilm", tmp_path)
    assert np.allclose(loaded.calibration[0], rows, atol=1e-4) and loaded.calibration[1].tolist() == agreed.tolist()
    assert np.allclose(loaded.shift, shift) and np.allclose(loaded.spread, spread)
    assert loaded.probability(rows[2]) == pytest.approx(1 / (1 + np.exp(-((rows[2] - shift) / spread).sum())))
    save_verifier(tmp_path, "e5", Verifier(np.ones(len(FEATURES))), {"pairs": 0})
    assert len(load_verifier("e5", tmp_path).calibration[0]) == 0


def test_weights_saved_without_a_scale_apply_to_raw_features(tmp_path):
    """A verifier.json trained before the scale was saved keeps scoring as it did."""
    import json

    weights = dict.fromkeys(FEATURES, 0.0) | {"bias": -20.0, "cosine": 25.0}
    (tmp_path / "verifier.json").write_text(json.dumps({"minilm": {"weights": weights}}))
    loaded = load_verifier("minilm", tmp_path)
    row = features("How do I reset my password?", "How can I reset my password?", 0.9, 0.0)
    assert loaded.probability(row) == pytest.approx(1 / (1 + np.exp(-(-20.0 + 25.0 * 0.9))))


def test_a_scale_without_a_unit_bias_names_the_fix():
    spread = np.ones(len(FEATURES))
    spread[0] = 2.0
    with pytest.raises(ValueError, match="train-verifier"):
        Verifier(np.zeros(len(FEATURES)), spread=spread)


def narrow_cosine_rows(n: int, low: float, seed: int, chinese: bool) -> tuple[np.ndarray, np.ndarray]:
    """Real feature rows of an English or Chinese pair, the cosine drawn in a narrow band (e5's 0.9-1) and the
    label from a steep logistic truth on it (p 0.5 at the middle of the band)."""
    query, cached = (
        ("如何快速学习Python？", "怎样快速学习Python？")
        if chinese
        else ("How do I learn Python quickly?", "How can I learn Python fast?")
    )
    rng = np.random.default_rng(seed)
    cosine, rival = rng.uniform(low, 1.0, n), rng.uniform(0.3, 0.8, n)  # the margin is no copy of the cosine
    rows = np.stack([features(query, cached, c, r) for c, r in zip(cosine, rival)])
    truth = 1 / (1 + np.exp(-80.0 * (cosine - (low + 1.0) / 2)))
    return rows, (rng.uniform(size=n) < truth).astype(float)


@pytest.mark.parametrize("chinese", [False, True], ids=["en", "zh"])
def test_the_standardized_scale_gives_a_narrow_cosine_the_weight_it_needs_and_a_constant_column_none(chinese):
    """Cosines within 0.9-1: fitted raw, the ridge holds the cosine's weight back and the bias cannot follow;
    on the standardized scale the fit recovers the truth. Han (constant within one language) standardizes to 0
    and keeps weight 0; `second` (no model check: the cosine again) shares the cosine's weight."""
    rows, labels = narrow_cosine_rows(1000, 0.9, 1, chinese)
    shift, spread = standardizer(rows)
    assert spread[0] == 1 and shift[0] == 0 and shift[FEATURES.index("han")] == float(chinese)
    verifier = Verifier(fit((rows - shift) / spread, labels, np.zeros(len(FEATURES))), shift=shift, spread=spread)
    cosine = FEATURES.index("cosine")
    second = FEATURES.index("second")
    assert (verifier.weights[cosine] + verifier.weights[second]) / spread[cosine] == pytest.approx(80.0, rel=0.25)
    assert verifier.weights[FEATURES.index("han")] == 0.0
    raw = Verifier(fit(rows, labels, np.zeros(len(FEATURES))))
    loss = [
        -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
        for p in (verifier.probabilities(rows), raw.probabilities(rows))
    ]
    assert loss[0] < loss[1], loss


@pytest.mark.parametrize("chinese", [False, True], ids=["en", "zh"])
def test_an_online_refit_on_verdicts_like_the_fits_keeps_the_scores_it_started_with(chinese):
    """The online refit reads the rows on the starting weights' scale: verdicts drawn from the same truth leave
    the scores where they were (raw rows refitted towards standardized weights did not: they moved the weights
    along directions the offline fit never weighed)."""
    rows, labels = narrow_cosine_rows(2000, 0.9, 2, chinese)
    shift, spread = standardizer(rows)
    verifier = Verifier(fit((rows - shift) / spread, labels, np.zeros(len(FEATURES))), shift=shift, spread=spread)
    before = verifier.probabilities(rows)
    live, agreed = narrow_cosine_rows(300, 0.9, 3, chinese)
    verifier.refit(live, agreed.astype(bool))
    assert verifier.fits == 1 and np.abs(verifier.probabilities(rows) - before).max() < 0.1
    assert np.allclose(verifier.probabilities(rows[:3]), [verifier.probability(r) for r in rows[:3]], atol=1e-12)
