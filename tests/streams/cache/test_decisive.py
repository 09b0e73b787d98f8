import math

import numpy as np
import pytest

from streams.cache.evidence import CALIBRATION, DECIDE, DECIDE_POOL, POOL, PooledEvidence
from streams.cache.learning import NEAR_BAND, ThresholdLearner
from streams.cache.verifier import FEATURES, MIN_SHIFT, Verifier, decisiveness, features, lead_of, load_verifier


def ranked(*scores):
    return {"action_id": "a", "ranking": [{"id": f"c{i}", "score": s} for i, s in enumerate(scores)]}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (ranked(0.9, 0.5, 0.1), 0.5),  # led by half the spread
        (ranked(0.88, 0.88, 0.80), 0.0),  # a tie
        (ranked(0.95, 0.85), 1.0),
        ({"text": "a generated answer"}, 0.0),
        (ranked(0.7), 0.0),
    ],
)
def test_decisiveness_is_the_lead_over_the_spread(value, expected):
    assert decisiveness(value) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("query", "cached"),
    [("How do I learn Python fast?", "How can I learn Python quickly?"), ("怎么快速学会游泳？", "如何快速学会游泳")],
)
def test_features_carry_decisiveness_and_the_lead_over_the_shift(query, cached):
    row = features(query, cached, 0.9, 0.5, decide=True, decisive=0.7, lead=0.2)
    assert len(row) == len(FEATURES) and row[FEATURES.index("decisive")] == 0.7
    assert row[FEATURES.index("steady")] == pytest.approx(math.log1p(0.2 / 0.1))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(ranked(0.9, 0.5, 0.1), 0.4), (ranked(0.88, 0.88, 0.8), 0.0), ({"text": "an answer"}, 0.0), (ranked(0.7), 0.0)],
)
def test_lead_is_the_choice_over_the_runner_up_in_the_scorers_units(value, expected):
    assert lead_of(value) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("query", "cached"),
    [("How do I learn Python fast?", "How can I learn Python quickly?"), ("怎么快速学会游泳？", "如何快速学会游泳")],
)
def test_a_lead_counts_for_more_the_less_the_rewording_moved(query, cached):
    """The same lead is steadier against a close rewording than a far one; a word-for-word match (cosine 1) is
    read at the least shift, not divided by zero."""
    steady = FEATURES.index("steady")
    close, far, same = (features(query, cached, c, 0.0, decide=True, lead=0.1)[steady] for c in (0.95, 0.7, 1.0))
    assert same == pytest.approx(math.log1p(0.1 / MIN_SHIFT)) and same > close > far > 0


def test_weights_saved_before_decisiveness_read_it_at_weight_zero(tmp_path):
    weights = {f: 0.1 for f in FEATURES[:-1]}
    rows = [[1.0] * (len(FEATURES) - 1)]
    (tmp_path / "verifier.json").write_text(
        __import__("json").dumps({"old": {"weights": weights, "calibration": {"rows": rows, "agreed": [1]}}})
    )
    verifier = load_verifier("old", tmp_path)
    assert verifier.weights[-1] == 0.0 and verifier.calibration[0].shape == (1, len(FEATURES))
    row = np.ones(len(FEATURES))
    assert verifier.probability(row) == verifier.probability(np.concatenate([row[:-1], [5.0]]))


def clean_calibration(n: int) -> Verifier:
    """A verifier scoring by the cosine column, with n calibration verdicts at cosines 0.70-0.99: those under
    0.8 disagree."""
    weights = np.zeros(len(FEATURES))
    weights[0], weights[1] = -20.0, 25.0
    rows = np.zeros((n, len(FEATURES)))
    rows[:, 0], rows[:, 1] = 1.0, np.linspace(0.70, 0.99, n)
    return Verifier(weights, calibration=(rows, rows[:, 1] >= 0.8))


def test_the_prior_certifies_before_any_live_verdict_and_live_verdicts_only_tighten():
    learner = ThresholdLearner(0.05, 0.9, explore=0.0)
    decide = PooledEvidence(clean_calibration(300), learner, pool=DECIDE_POOL, prior_bounds=True)
    prior = decide.threshold()
    assert 0 < prior < 1 and prior == decide.prior[DECIDE_POOL]
    for _ in range(3000):  # agreeing verdicts just under the prior loosen the pooled threshold, not the served one
        learner.observe(DECIDE_POOL, "k", prior - 0.05, True)
    assert learner.threshold(DECIDE_POOL) < prior == decide.threshold()
    assert not decide.allows("entry", 0.5, prior - 0.01) and decide.allows("entry", 0.99, 0.999)
    for _ in range(500):  # disagreements at the top raise it (once they pass a tenth of the verdicts kept)
        learner.observe(DECIDE_POOL, "bad", 0.999, False)
    assert decide.threshold() > prior


def test_each_language_neighbourhood_is_certified_apart():
    """Clean Chinese calibration verdicts certify Chinese hits only: English verdicts that disagree one time in five
    at every score certify nothing, where one pool would have served both at the pooled rate."""
    weights = np.zeros(len(FEATURES))
    weights[0], weights[1] = -20.0, 25.0
    rows = np.zeros((600, len(FEATURES)))
    rows[:, 0], rows[:, 1] = 1.0, np.tile(np.linspace(0.70, 0.99, 300), 2)
    rows[:300, FEATURES.index("han")] = 1.0
    agreed = np.concatenate([rows[:300, 1] >= 0.8, np.arange(300) % 5 != 0])
    decide = PooledEvidence(
        Verifier(weights, calibration=(rows, agreed)),
        ThresholdLearner(0.05, 0.9, explore=0.0),
        pool=DECIDE_POOL,
        prior_bounds=True,
        by_language=True,
    )
    chinese, english = rows[299], rows[599]
    assert math.isfinite(decide.threshold(chinese)) and math.isinf(decide.threshold(english))
    assert decide.allows("zh", 0.99, 0.999, chinese) and not decide.allows("en", 0.99, 0.999, english)


def test_decide_and_generate_pools_certify_apart():
    learner = ThresholdLearner(0.05, 0.9, explore=0.0)
    PooledEvidence(clean_calibration(300), learner, pool=DECIDE_POOL, prior_bounds=True)
    generate = PooledEvidence(Verifier(np.zeros(len(FEATURES))), learner)
    assert math.isinf(generate.threshold())
    assert learner.stats(DECIDE_POOL)["verdicts"] == 300 and learner.stats(POOL)["verdicts"] == 0


def test_exploration_is_denser_near_the_threshold():
    learner = ThresholdLearner(0.05, 0.9, explore=0.1, seed=3)
    for _ in range(400):
        learner.observe(("p",), CALIBRATION, 0.9, True)
    threshold = learner.threshold(("p",))
    near = sum(not learner.allows(("p",), "q", threshold + NEAR_BAND / 2) for _ in range(4000))
    far = sum(not learner.allows(("p",), "q", min(threshold + 3 * NEAR_BAND, 1.0)) for _ in range(4000))
    assert near > 2 * far > 0


DECIDE_PARTITION = ("acme", "faq", "", "latin", "decide:256:abc")


RECORDS = ["minilm|e5", "minilm"]  # by-language's, and the default embedder's (auto: MiniLM)


def shipped_cache(record: str):
    """A SemanticCache on the hashing embedder whose decide pool starts from the shipped decide verifier and prior
    of `record` (no live verdict yet)."""
    from streams.cache.embedders import HashingEmbedder
    from streams.cache.semantic import SemanticCache

    learner = ThresholdLearner(0.05, 0.9, explore=0.0)
    decide = PooledEvidence(
        load_verifier(record + DECIDE, "/nonexistent"),
        learner,
        pool=DECIDE_POOL,
        prior_bounds=True,
        by_language=True,
    )
    generate = PooledEvidence(Verifier(np.zeros(len(FEATURES))), learner)
    return SemanticCache(HashingEmbedder(), 0.3, evidence=generate, decide_evidence=decide)


@pytest.mark.parametrize(
    ("language", "cached", "asked"),
    [
        ("latin", "How do I reset my password?", "How can I reset my password?"),
        ("zh", "怎么重置我的密码？", "请问怎么重置我的密码"),
    ],
)
@pytest.mark.parametrize("record", RECORDS)
def test_a_decisive_cached_decision_serves_a_rewording_before_any_live_verdict(record, language, cached, asked):
    partition = (*DECIDE_PARTITION[:3], language, DECIDE_PARTITION[4])
    cache = shipped_cache(record)
    assert math.isfinite(cache.decide_evidence.threshold()), "the offline prior certifies a threshold at once"
    cache.insert(partition, cached, ranked(0.9, 0.4, 0.3, 0.2, 0.1))
    hit, candidate = cache.probe(partition, asked)
    assert hit is not None and candidate.served
    assert candidate.features[FEATURES.index("decisive")] == pytest.approx(0.625)


@pytest.mark.parametrize(
    ("language", "cached", "asked"),
    [
        ("latin", "How do I reset my password?", "How can I reset my password?"),
        ("zh", "怎么重置我的密码？", "请问怎么重置我的密码"),
    ],
)
@pytest.mark.parametrize("record", RECORDS)
def test_a_close_call_scores_below_a_decisive_one(record, language, cached, asked):
    """A choice that led by a hair is less likely to survive a rewording than one that led by far; in English the
    shipped prior does not serve it (in the tune slice's Chinese rewordings close calls flipped seldom)."""
    partition = (*DECIDE_PARTITION[:3], language, DECIDE_PARTITION[4])
    probes = []
    for value in (ranked(0.9, 0.899, 0.3, 0.2, 0.1), ranked(0.9, 0.4, 0.3, 0.2, 0.1)):
        cache = shipped_cache(record)
        cache.insert(partition, cached, value)
        probes.append(cache.probe(partition, asked))
    (close_hit, close), (_, decisive) = probes
    assert close is not None and decisive is not None and close.score < decisive.score
    if language == "latin":
        assert close_hit is None and not close.served
