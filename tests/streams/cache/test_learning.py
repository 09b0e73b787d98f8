import math
import random

import numpy as np
import pytest

from schemas.records import Candidate as Option
from schemas.records import Control, Decision, Request, Work
from streams.cache.embedders import HashingEmbedder
from streams.cache.exact import cache_key
from streams.cache.learning import ThresholdLearner, binomial_cdf, error_bounded
from streams.cache.semantic import SemanticCache, answers_agree, partition_of
from streams.cache.stage import CacheStage
from streams.core.switches import SWITCHES

ALL_ON = dict.fromkeys(SWITCHES, True)
P = ("acme", "faq", "", "latin", "generate:256")


def p_correct(score: float) -> float:
    """The synthetic truth: a candidate at `score` answers the question with this probability."""
    return 1 / (1 + math.exp(-60 * (score - 0.9)))


def true_error_above(threshold: float, lo: float = 0.75) -> float:
    """The false-hit rate of candidates scoring at least `threshold`, scores uniform on [lo, 1]."""
    grid = [threshold + (1 - threshold) * (i + 0.5) / 2000 for i in range(2000)]
    return 1 - sum(map(p_correct, grid)) / len(grid) if threshold < 1 else 0.0


@pytest.mark.parametrize(
    "k,n,p,expected", [(0, 2, 0.5, 0.25), (1, 3, 0.5, 0.5), (3, 3, 0.1, 1.0), (0, 45, 0.05, 0.95**45)]
)
def test_binomial_cdf(k, n, p, expected):
    assert binomial_cdf(k, n, p) == pytest.approx(expected, rel=1e-9)


def test_no_evidence_no_threshold_and_too_little_evidence_none_either():
    learner = ThresholdLearner(0.05, 0.9)
    assert learner.threshold(P) == math.inf
    for _ in range(20):  # below MIN_VERDICTS: nothing is tested, nothing is served
        learner.observe(P, "q", 0.99, True)
    assert learner.threshold(P) == math.inf


def test_explain_says_what_the_first_tested_threshold_held_against_what_it_allows():
    """Clean verdicts: the first threshold tested holds no disagreement, within what it allows, and one is served.
    One in five disagreeing at every score: more than allowed there, so none is. Too few: nothing tested."""
    few = ThresholdLearner(0.05, 0.9)
    for i in range(20):
        few.observe(P, f"q{i}", 0.99, True)
    assert few.explain(P) == {"verdicts": 20, "disagreements": 0, "level": pytest.approx(0.05), "first_test": None}

    clean, noisy = ThresholdLearner(0.05, 0.9), ThresholdLearner(0.05, 0.9)
    for i in range(300):
        score = 1.0 - i / 1000
        clean.observe(P, f"q{i}", score, True)
        noisy.observe(P, f"q{i}", score, i % 5 != 0)
    served = clean.explain(P)
    assert clean.threshold(P) < 1.0
    assert served["first_test"]["verdicts"] >= 118 and served["first_test"]["disagreements"] == 0
    assert served["first_test"]["allowed"] >= 0
    refused = noisy.explain(P)
    assert noisy.threshold(P) == math.inf
    first = refused["first_test"]
    assert first["disagreements"] == math.ceil(first["verdicts"] / 5) > first["allowed"] >= 0
    assert refused["disagreements"] == 60 and refused["verdicts"] == 300
    # `allowed` is the test's own edge: one more disagreement than allowed fails it at that level
    assert error_bounded(first["allowed"], first["verdicts"], 0.05, refused["level"])
    assert not error_bounded(first["allowed"] + 1, first["verdicts"], 0.05, refused["level"])


def test_learned_threshold_keeps_the_false_hit_rate_under_target_with_the_stated_confidence():
    """Over many synthetic verdict streams, the threshold's true error exceeds the target in at most
    1 - confidence of them (plus sampling slack), and nearly all of them serve something (a stream whose
    first tested threshold fails serves nothing: fixed-sequence testing stops at its first failure)."""
    target, confidence, trials, failures, served = 0.05, 0.9, 40, 0, []
    for trial in range(trials):
        rng = random.Random(trial)
        learner = ThresholdLearner(target, confidence)
        for _ in range(1500):
            score = rng.uniform(0.75, 1.0)
            learner.observe(P, f"q{rng.random()}", score, rng.random() < p_correct(score))
        threshold = learner.threshold(P)
        if threshold < 1.0:
            failures += true_error_above(threshold) > target
            served.append(threshold)
    assert len(served) >= 0.9 * trials, "enough evidence: most streams find a threshold below the top"
    assert failures / trials <= (1 - confidence) + 0.05
    assert min(served) >= 0.9, "the error bound keeps the threshold above where candidates turn wrong"


def test_served_hits_stay_under_target_when_the_learner_decides_online():
    """The learner serving its own traffic: served hits are learned at a 2% shadow rate, refused candidates
    at rate 1; the realized false-hit rate of what was served stays under target."""
    rng = random.Random(7)
    learner = ThresholdLearner(0.05, 0.9)
    served = wrong = 0
    for i in range(20_000):
        score = rng.uniform(0.75, 1.0)
        correct = rng.random() < p_correct(score)
        if learner.allows(P, f"q{i}", score):
            served += 1
            wrong += not correct
            if rng.random() < 0.02:
                learner.observe(P, f"q{i}", score, correct)
        else:
            learner.observe(P, f"q{i}", score, correct)
    assert served > 1500 and wrong / served <= 0.05


def test_a_disagreement_vetoes_its_entry_at_and_below_its_score():
    learner = ThresholdLearner(0.05, 0.9, floor=0.0)
    for i in range(200):
        learner.observe(P, f"q{i}", 0.95, True)
    assert learner.allows(P, "reset password", 0.96)
    learner.observe(P, "reset password", 0.97, False)
    assert not learner.allows(P, "reset password", 0.97) and learner.allows(P, "reset password", 0.98)
    assert learner.allows(P, "another question", 0.96), "the veto is per entry"


def test_floor_raises_every_partition():
    learner = ThresholdLearner(0.05, 0.9)
    for i in range(200):
        learner.observe(P, f"q{i}", 0.9, True)
    assert learner.threshold(P) <= 0.9
    learner.floor = 0.97
    assert learner.threshold(P) == 0.97 and not learner.allows(P, "q", 0.96)


def test_semantic_cache_without_evidence_serves_no_hit_but_names_the_candidate():
    cache = SemanticCache(HashingEmbedder(), threshold=0.5, learner=ThresholdLearner(0.05, 0.9))
    cache.insert(P, "How do I reset my password?", "steps")
    hit, candidate = cache.probe(P, "how do I reset my password")
    assert hit is None and candidate.question == "How do I reset my password?" and not candidate.served
    assert cache.refusals["learned_threshold"] == 1
    for _ in range(130):  # 118 clean verdicts pass a first fit at 0.05 with 0.9 confidence
        cache.learn(candidate, True)
    hit, candidate = cache.probe(P, "how do I reset my password")
    assert hit.value == "steps" and candidate.served


def test_an_l3_pre_answer_asked_by_its_own_question_needs_no_evidence():
    cache = SemanticCache(HashingEmbedder(), threshold=0.5, learner=ThresholdLearner(0.05, 0.9))
    cache.insert(P, "Are they waterproof?", "yes", predictive=True)
    assert cache.lookup(P, "are they  waterproof?").value == "yes"
    assert cache.lookup(P, "Are they waterproof for rivers?") is None


@pytest.mark.parametrize(
    "cached,fresh,agree",
    [
        ({"action_id": "a"}, {"action_id": "a"}, True),
        ({"action_id": "a"}, {"action_id": "b"}, False),
        ({"text": "Reset it in Settings."}, {"text": "reset it in settings"}, True),
        ({"text": "Reset it in Settings."}, {"text": "Reset it in the app."}, False),
        ({"text": ""}, {"text": ""}, False),
    ],
)
def test_answers_agree(cached, fresh, agree):
    assert answers_agree(cached, fresh) is agree


def faq_work(request_id: str, question: str) -> Work:
    request = Request(
        request_id=request_id,
        tenant="acme",
        service="help",
        decision_type="faq",
        state=question,
        candidates=[Option(id="a", text="settings page"), Option(id="b", text="call support")],
    )
    work = Work(request=request, admitted_at=0.0, model="gpt-4o-mini")
    work.cache_key = cache_key(work)
    return work


@pytest.fixture
def stage(tmp_path):
    from streams import settings as settings_mod

    return CacheStage(
        {}, settings_mod.load().replace(data_dir=str(tmp_path), cache_embedder="hashing", cache_semantic_threshold=0.5)
    )


def ask(stage: CacheStage, work: Work):
    return stage.lookup_semantic(work, stage.embed([work])[0])


def test_stage_learns_from_misses_then_serves_and_learn_records_shadow_verdicts(stage):
    """A miss refused for lack of evidence is answered and compared with its neighbour's answer (a verdict that
    costs no tokens); once the pooled verdicts of every partition certify the verifier's threshold, the stage
    serves L2 hits, and a shadow disagreement on one is learned and vetoes its entry."""
    first = faq_work("r0", "How do I reset my password?")
    evidence = stage.semantic.evidence_for(partition_of(first.request))  # a decide partition: the decide pool
    assert evidence is stage.semantic.decide_evidence
    assert ask(stage, first) is None and first.cache_match == {}
    stage.fill(first, Decision(request_id="r0", tier="fine", action_id="a"), ALL_ON)
    refused = faq_work("r1", "how do I reset my password")
    assert ask(stage, refused) is None and refused.cache_match["served"] is False
    stage.fill(refused, Decision(request_id="r1", tier="fine", action_id="a"), ALL_ON)
    stats = evidence.stats()
    assert stats["verdicts"] + stats["fit_verdicts"] == 1, "the miss's answer agreed with the neighbour's: learned"
    learned = stage.take_changes()
    verdicts = [r for r in learned if r["op"] == "verdict"]
    assert len(verdicts) == 1 and verdicts[0]["candidate"]["features"], "rebuildable: the record holds the features"
    row = np.array(refused.cache_match["features"])
    for i in range(400):  # other partitions' verdicts at this candidate's score certify the one pooled threshold
        evidence.observe(f"elsewhere{i}", row, refused.cache_match["cosine"], True)
    served = faq_work("r2", "how do I reset my password")
    hit = ask(stage, served)
    assert hit is not None and served.cache_match["served"] is True
    assert stage.answer(served, hit).decision.tier == "cache_l2"
    before = evidence.stats()
    stage.learn(served, agreed=False)
    after = evidence.stats()
    assert after["verdicts"] + after["fit_verdicts"] == before["verdicts"] + before["fit_verdicts"] + 1
    assert evidence.vetoes, "a shadow disagreement vetoes the entry at its cosine"
    assert ask(stage, faq_work("r3", "how do I reset my password")) is None
    stage.learn(faq_work("s2", "never asked"), agreed=True)  # no L2 match: nothing to learn
    assert evidence.stats()["fit_verdicts"] + evidence.stats()["verdicts"] == after["verdicts"] + after["fit_verdicts"]


def test_tune_control_raises_the_floor_of_every_partition(stage):
    stage.on_control(Control(kind="tune", key="cache.l2.min_similarity", value=0.99))
    assert stage.semantic.min_similarity == 0.99 and stage.semantic.min_cosine == 0.99
    with pytest.raises(ValueError, match="takes a number"):
        stage.on_control(Control(kind="tune", key="cache.l2.min_similarity", value="high"))


def test_tune_control_sets_the_fixed_threshold_where_nothing_is_learned(tmp_path):
    from streams import settings as settings_mod

    fixed = CacheStage(
        {},
        settings_mod.load().replace(
            data_dir=str(tmp_path), cache_embedder="hashing", cache_semantic_threshold=0.5, cache_max_error=0.0
        ),
    )
    assert fixed.learner is None and fixed.semantic.threshold == 0.5
    fixed.on_control(Control(kind="tune", key="cache.l2.min_similarity", value=0.9))
    assert fixed.semantic.threshold == 0.9


PEER_FALSE_HITS = [  # GPTCache #694 (a question and its reversal), semantic-router #2691 (negation, on/off)
    ("How to turn on dark mode?", "How to turn off dark mode?"),
    ("How do I enable two-factor login?", "How do I disable two-factor login?"),
    ("Why do dogs chase cats?", "Why do cats chase dogs?"),
    ("Can I take ibuprofen with alcohol?", "Can I not take ibuprofen with alcohol?"),
    ("Is coffee good for your heart?", "Is coffee bad for your heart?"),
]


@pytest.mark.parametrize("cached,asked", PEER_FALSE_HITS)
def test_peers_false_hits_are_refused_even_where_the_learner_serves_low_scores(cached, asked):
    learner = ThresholdLearner(0.05, 0.9)
    for i in range(200):
        learner.observe(P, f"q{i}", 0.3, True)
    cache = SemanticCache(HashingEmbedder(), threshold=0.3, learner=learner)
    cache.insert(P, cached, "cached answer")
    assert learner.threshold(P) <= 0.3
    assert cache.probe(P, asked) == (None, None), "the verification checks refuse it before the learner"


def test_a_false_hit_the_checks_miss_is_served_once_then_vetoed_by_its_shadow_verdict():
    learner = ThresholdLearner(0.05, 0.9)
    for i in range(200):
        learner.observe(P, f"q{i}", 0.3, True)
    cache = SemanticCache(HashingEmbedder(), threshold=0.3, learner=learner)
    cache.insert(P, "What should I eat before a run?", "a banana an hour before")
    hit, candidate = cache.probe(P, "What should I eat during a run?")
    assert hit is not None, "no lexical check tells during from before"
    cache.learn(candidate, agreed=False)
    assert cache.probe(P, "What should I eat during a run?")[0] is None
