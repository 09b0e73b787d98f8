"""Promotion of L2 near-misses in the cache stage (Krites): a miss just under the serving threshold gets a naive
twin as shadow work; judged the same as the cached answer, its question becomes a key of that answer."""

import numpy as np
import orjson
import pytest

from schemas.records import Candidate as Option
from schemas.records import Decision, Request, Work
from streams.cache.evidence import DECIDE
from streams.cache.exact import cache_key
from streams.cache.modelcheck import check_name, decision_name
from streams.cache.stage import JUDGE_SUFFIX, CacheStage
from streams.cache.verifier import FEATURES, Verifier, save_verifier
from streams.core.switches import SWITCHES
from streams.shadow.verdict import ShadowJoin

ALL_ON = dict.fromkeys(SWITCHES, True)
# (cached question, a near-miss asking the same, a near-miss asking something else, the first near-miss up to case,
# spacing and Unicode form)
ENGLISH = (
    "How do I reset my password?",
    "How can I reset my password?",
    "How do I cancel my plan?",
    "HOW CAN I  RESET MY PASSWORD?",
)
CHINESE = ("如何重置我的密码？", "怎么重置我的密码？", "如何重置我的套餐？", " 怎么重置我的密码? ")  # NFKC: ？ is ?


def new_stage(tmp_path, margin: float = 0.2) -> CacheStage:
    """A stage on the hashing embedder whose verifier reads the cosine alone (p 0.8 at cosine 0.54, 0.99 at 1.0)
    and has no calibration verdicts: nothing is certified, so every candidate is refused and the band is
    p >= 1 - 0.05 - margin."""
    from streams import settings as settings_mod

    settings = settings_mod.load().replace(
        data_dir=str(tmp_path), cache_embedder="hashing", cache_semantic_threshold=0.5, cache_promote_margin=margin
    )
    weights = np.zeros(len(FEATURES))
    weights[0], weights[1] = -2.38, 6.98
    name = decision_name("hashing", check_name(settings.cache_model_check, "hashing"))
    for record in (name, name + DECIDE):  # these works decide: the decide pool starts from the second
        save_verifier(tmp_path, record, Verifier(weights), {})
    return CacheStage({}, settings)


def work_of(request_id: str, question: str) -> Work:
    request = Request(
        request_id=request_id,
        tenant="acme",
        service="help",
        decision_type="faq",
        state=question,
        candidates=[Option(id="a", text="settings"), Option(id="b", text="support")],
    )
    work = Work(request=request, admitted_at=0.0, model="gpt-4o-mini", context="ctx", context_tokens=1)
    work.cache_key = cache_key(work)
    return work


def ask(stage: CacheStage, request_id: str, question: str):
    work = work_of(request_id, question)
    return work, stage.lookup_semantic(work, stage.embed([work])[0])


def answered(stage: CacheStage, question: str, action: str) -> None:
    work, _ = ask(stage, f"fill-{question}", question)
    stage.fill(work, Decision(request_id=work.request.request_id, tier="fine", action_id=action), ALL_ON)


def judged(stage: CacheStage, twin: Work, naive_action: str) -> str:
    """The twin decided the naive way, then judged as postprocess judges it."""
    twin.decision = Decision(request_id=twin.request.request_id, tier="fine", action_id=naive_action)
    return stage.promote(twin, lambda cached: ShadowJoin(0.8).agrees(twin, cached))


@pytest.mark.parametrize("texts", [ENGLISH, CHINESE], ids=["en", "zh"])
def test_a_near_miss_judged_the_same_is_promoted_and_then_hits(tmp_path, texts):
    cached, near, _, recased = texts
    stage = new_stage(tmp_path)
    answered(stage, cached, "a")
    stage.take_changes()
    work, hit = ask(stage, "r1", near)
    assert hit is None and work.cache_match["near_miss"], "refused (nothing certified), within the band"
    [twin] = stage.judge_twins()
    assert twin.shadow == "promote" and twin.request.request_id == "r1" + JUDGE_SUFFIX
    assert twin.cache_key == work.cache_key and twin.cache_match["question"] == cached and not twin.request.stream
    assert ask(stage, "r2", near)[1] is None and stage.judge_twins() == [], "one judgement at a time per question"
    stage.fill(work, Decision(request_id="r1", tier="fine", action_id="a"), ALL_ON)  # the miss answered as usual

    assert judged(stage, twin, "a") == "promoted"
    for request_id, question in (("r3", near), ("r4", recased)):
        _, hit = ask(stage, request_id, question)
        assert hit is not None and hit.level == "l2" and hit.entry.alias_of == cached
        assert hit.value["action_id"] == "a" and hit.matched == near
    assert stage.judge_twins() == [], "a promoted key is no near-miss any more"
    [record] = [r for r in stage.take_changes() if r["op"] == "fill" and r["entry"]["alias_of"]]
    assert record["op"] == "fill" and record["question"] == near and record["vector"] is not None


@pytest.mark.parametrize("texts", [ENGLISH, CHINESE], ids=["en", "zh"])
def test_a_near_miss_judged_different_is_never_promoted(tmp_path, texts):
    cached, _, other, _ = texts
    stage = new_stage(tmp_path)
    answered(stage, cached, "a")
    work, hit = ask(stage, "r1", other)
    assert hit is None and work.cache_match["near_miss"]
    [twin] = stage.judge_twins()
    assert judged(stage, twin, "b") == "different"
    assert ask(stage, "r2", other)[1] is None and stage.semantic.promotions == 0
    assert not any(r["entry"]["alias_of"] for r in stage.take_changes() if r["op"] == "fill")
    [again] = stage.judge_twins()
    assert judged(stage, again, "b") == "different" and ask(stage, "r3", other)[1] is None


def promoted_stage(tmp_path):
    """A stage where the English and the Chinese near-miss were judged the same as their cached answer."""
    stage = new_stage(tmp_path)
    for cached, near, _, _ in (ENGLISH, CHINESE):
        answered(stage, cached, "a")
        ask(stage, f"r-{near}", near)
    for twin in stage.judge_twins():
        assert judged(stage, twin, "a") == "promoted"
    return stage


def test_a_promotion_survives_a_rebuild_from_the_cache_state_records(tmp_path):
    stage = promoted_stage(tmp_path)
    records = orjson.loads(orjson.dumps(stage.take_changes()))  # through JSON, as on the topic

    after = new_stage(tmp_path)
    after.restore(records)
    for cached, near, _, recased in (ENGLISH, CHINESE):
        _, hit = ask(after, f"again-{near}", recased)
        assert hit is not None and hit.entry.alias_of == cached and hit.value["action_id"] == "a"
    assert new_stage(tmp_path).lookup_semantic(work_of("x", ENGLISH[3]), None) is None, "empty: nothing served"


def test_a_fresh_alias_keeps_its_key_against_a_later_plain_fill(tmp_path):
    """The judging twin may come back before the miss's own answer: that fill does not undo the promotion."""
    stage = new_stage(tmp_path)
    cached, near, _, recased = ENGLISH
    answered(stage, cached, "a")
    work, _ = ask(stage, "r1", near)
    [twin] = stage.judge_twins()
    assert judged(stage, twin, "a") == "promoted"
    stage.fill(work, Decision(request_id="r1", tier="fine", action_id="a"), ALL_ON)
    assert ask(stage, "r2", recased)[1].entry.alias_of == cached


def test_no_judgement_when_off_for_refills_or_when_the_cached_answer_is_gone(tmp_path):
    stage = new_stage(tmp_path, margin=0.0)
    answered(stage, ENGLISH[0], "a")
    work, _ = ask(stage, "r1", ENGLISH[1])
    assert "near_miss" not in work.cache_match and stage.judge_twins() == []

    stage = new_stage(tmp_path)
    answered(stage, ENGLISH[0], "a")
    refill = work_of("r1", ENGLISH[1])
    refill.refresh = True
    stage.lookup_semantic(refill, stage.embed([refill])[0])
    assert stage.judge_twins() == [], "a refill is no request: no shadow work"
    ask(stage, "r2", ENGLISH[1])
    [twin] = stage.judge_twins()
    stage.semantic.partitions.clear()  # evicted meanwhile
    assert judged(stage, twin, "a") == "gone"


def test_the_margin_is_checked():
    from streams.cache.embedders import HashingEmbedder
    from streams.cache.semantic import SemanticCache

    with pytest.raises(ValueError, match="JEV_CACHE_PROMOTE_MARGIN"):
        SemanticCache(HashingEmbedder(), 0.5, promote_margin=1.5)


def test_a_disagreeing_verdict_on_a_promoted_key_demotes_it_here_and_after_a_rebuild(tmp_path):
    stage = promoted_stage(tmp_path)
    english, _ = ask(stage, "s1", ENGLISH[3])
    stage.learn(english, agreed=False)  # the shadow sample of the served alias hit disagreed
    assert ask(stage, "s2", ENGLISH[3])[1] is None and stage.semantic.demotions == 1
    assert ask(stage, "s3", CHINESE[3])[1] is not None, "only the key judged wrong is removed"
    after = new_stage(tmp_path)
    after.restore(orjson.loads(orjson.dumps(stage.take_changes())))
    assert ask(after, "s4", ENGLISH[3])[1] is None and ask(after, "s5", CHINESE[3])[1] is not None


def test_a_question_whose_twin_never_came_back_is_judged_again_later(tmp_path, monkeypatch):
    import streams.cache.stage as stage_module

    stage = new_stage(tmp_path)
    answered(stage, ENGLISH[0], "a")
    ask(stage, "r1", ENGLISH[1])
    assert len(stage.judge_twins()) == 1
    ask(stage, "r2", ENGLISH[1])
    assert stage.judge_twins() == [], "its twin is still out"
    later = stage_module.time.time() + stage.judge_again_s + 1
    monkeypatch.setattr(stage_module.time, "time", lambda: later)  # the shadow scorer dropped the first twin (age)
    ask(stage, "r3", ENGLISH[1])
    assert [t.request.request_id for t in stage.judge_twins()] == ["r3" + JUDGE_SUFFIX]
