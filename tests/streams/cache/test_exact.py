import re
import unicodedata

import pytest

from schemas.records import Candidate, Decision, Request, TemplateRef, Turn, Work
from streams.cache.exact import BoundedLRU, cache_key, normalize
from streams.cache.stage import CacheStage
from streams.core.switches import SWITCHES

ALL_ON = dict.fromkeys(SWITCHES, True)


def work(**changes) -> Work:
    fields = dict(
        request_id="r1",
        tenant="acme",
        service="search",
        decision_type="rank",
        state="find shoes",
        candidates=[Candidate(id="a", text="red shoes"), Candidate(id="b", text="blue shoes")],
    )
    model = changes.pop("model", "gpt-4o-mini")
    fields.update(changes)
    return Work(request=Request(**fields), admitted_at=0.0, model=model)


@pytest.mark.parametrize(
    "text",
    [
        "find   shoes ",
        "\tHold 40 units\n at A? ",
        "",
        "  ",
        "霞云岭\u3000国家森林公园 的附近",
        "ＡＢＣ　１２３",
        "ﬁne",
        "a\x1cb\x1fc\x85d\u2028e\u00a0f\u200bg",
        "电 话\r\n号码",
    ],
)
def test_normalize_is_nfkc_with_whitespace_collapsed(text):  # the fast path gives what the definition gives
    assert normalize(text) == re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip()


def test_key_ignores_ids_whitespace_and_candidate_order():
    base = cache_key(work())
    assert cache_key(work(request_id="r2", session_id="s9", user_id="u7")) == base
    assert cache_key(work(state="find   shoes ")) == base
    reordered = [Candidate(id="b", text="blue shoes"), Candidate(id="a", text="red shoes")]
    assert cache_key(work(candidates=reordered)) == base


@pytest.mark.parametrize(
    "changes",
    [
        {"model": "gpt-4o"},
        {"state": "find boots"},
        {"tenant": "other"},
        {"decision_type": "route"},
        {"kind": "generate"},
        {"candidates": [Candidate(id="a", text="red shoes")]},
        {"template": TemplateRef(id="t", version="2")},
        {"history": [Turn(role="user", content="hi")]},
    ],
)
def test_key_changes_with_what_changes_the_answer(changes):
    assert cache_key(work(**changes)) != cache_key(work())


def test_lru_evicts_least_recently_used():
    lru = BoundedLRU(2)
    lru["a"], lru["b"] = 1, 2
    assert lru.get("a") == 1
    lru["c"] = 3
    assert "b" not in lru and "a" in lru and "c" in lru and lru.evictions == 1


def stage_with_one_entry(tmp_path, versions: dict):
    """The stream's L1 (CacheStage over a plain dict in place of the Faust table), holding one answer."""
    from streams import settings as settings_mod

    stage = CacheStage({}, settings_mod.load().replace(data_dir=str(tmp_path), cache_embedder="none"))
    for kind, version in versions.items():
        stage.versions.bump(kind, version)
    entry = work()
    entry.cache_key = "k"
    stage.fill(entry, Decision(request_id="r1", tier="fine", action_id="a"), ALL_ON)
    return stage, entry


def test_version_bump_serves_stale_once_and_queues_one_refresh(tmp_path):
    stage, entry = stage_with_one_entry(tmp_path, {"prompt": "1"})
    assert not stage.lookup_exact(entry, ALL_ON).stale
    stage.versions.bump("prompt", "2")
    first = stage.lookup_exact(entry, ALL_ON)
    assert first.stale and first.value["action_id"] == "a"
    assert stage.lookup_exact(entry, ALL_ON) is None
    assert [w.refresh for w in stage.refreshes()] == [True]
    assert stage.refresh.put("k") is False  # in flight: no second refresh
    stage.fill(entry, Decision(request_id="r1", tier="fine", action_id="b"), ALL_ON)
    hit = stage.lookup_exact(entry, ALL_ON)
    assert not hit.stale and hit.value["action_id"] == "b" and hit.entry.versions == {"prompt": "2"}


def test_bump_of_an_unrelated_kind_leaves_others_fresh_only_if_recorded(tmp_path):
    stage, entry = stage_with_one_entry(tmp_path, {"model": "a"})
    stage.versions.bump("template:risk", "3")
    assert stage.lookup_exact(entry, ALL_ON).stale  # entry predates the template version: refreshed, not expired


def test_stage_takes_the_model_check_and_its_calibrated_thresholds(tmp_path):
    pytest.importorskip("sentence_transformers", reason="the embed extra is not installed")
    from streams import settings as settings_mod
    from streams.cache.calibration import ThresholdStore

    ThresholdStore(tmp_path).save("hashing+minilm", {"threshold": 0.61, "check_threshold": 0.87})
    settings = settings_mod.load().replace(data_dir=str(tmp_path), cache_embedder="hashing")
    stage = CacheStage({}, settings.replace(cache_model_check="minilm"))
    assert stage.semantic.check.name == "minilm" and stage.semantic.check.threshold == 0.87
    assert stage.semantic.threshold == 0.61
    assert CacheStage({}, settings.replace(cache_model_check="none")).semantic.check is None
    with pytest.raises(ValueError, match="primary embedder itself"):
        CacheStage({}, settings.replace(cache_model_check="hashing"))


@pytest.mark.parametrize("state, action", [("find shoes", "a"), ("把40件库存从上海仓调往北京仓", "调拨")])
def test_l1_entries_leave_the_collectors_scans_and_serve_whole(tmp_path, state, action):
    """The table keeps up to JEV_CACHE_MAX_ENTRIES answers; every full collection scans what the collector
    tracks, so an entry is bytes (a dict holding the answer's lists was 4 tracked objects)."""
    import gc

    from schemas.records import Ranked
    from streams import settings as settings_mod

    stage = CacheStage({}, settings_mod.load().replace(data_dir=str(tmp_path), cache_embedder="none"))
    decision = Decision(
        request_id="r1",
        tier="fine",
        action_id=action,
        text=f"{action}：理由",
        ranking=[Ranked(id=action, score=0.9), Ranked(id="b", score=0.1)],
        chain=["rules", "fine"],
        input_tokens=42,
    )
    entry = work(state=state)
    entry.cache_key = "k"
    stage.fill(entry, decision, ALL_ON)
    gc.collect()
    assert not any(gc.is_tracked(value) for value in stage.table.values())
    hit = stage.lookup_exact(entry, ALL_ON)
    assert hit.value == decision.to_representation() and hit.entry.tokens == 42
