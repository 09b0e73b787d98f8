from concurrent.futures import Future

import numpy as np
import pytest

from schemas.records import Candidate, Request
from streams.cache import index as index_module
from streams.cache.embedders import HashingEmbedder
from streams.cache.entry import VersionBook
from streams.cache.index import VectorIndex
from streams.cache.modelcheck import ModelCheck
from streams.cache.semantic import SemanticCache, language_of, partition_of

P = ("acme", "faq", "", "latin", "generate:256")


def unit(rows):
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize("max_exact", [1000, 5])
def test_index_finds_nearest_exact_and_hnsw(max_exact):
    pytest.importorskip("faiss", reason="the ann extra is not installed") if max_exact == 5 else None
    rng = np.random.default_rng(1)
    rows = unit(rng.standard_normal((50, 16)))
    index = VectorIndex(16, max_exact=max_exact)
    index.add(rows[:20])
    index.add(rows[20:])
    assert index.kind == ("hnsw" if max_exact == 5 else "exact")
    for i in (0, 25, 49):
        best, score = index.search(rows[i], 3)[0]
        assert best == i and score == pytest.approx(1.0, abs=1e-5)


def test_hit_needs_threshold_and_verification(embedder):
    cache = SemanticCache(embedder, threshold=0.5)
    cache.insert(P, "How do I gain weight?", "eat more")
    assert cache.lookup(P, "How do I lose weight?") is None
    assert cache.refusals["antonym"] == 1
    hit = cache.lookup(P, "how do I gain weight")
    assert hit.value == "eat more" and hit.level == "l2" and hit.score > 0.9
    assert SemanticCache(embedder, threshold=0.5, verify=False).lookup(P, "x") is None


def test_model_check_refuses_what_the_second_model_doubts():
    cache = SemanticCache(HashingEmbedder(), threshold=0.3, check=ModelCheck(HashingEmbedder(64), threshold=0.99))
    cache.insert(P, "How do I reset my password?", "steps")
    assert cache.lookup(P, "How can I reset my password?") is None and cache.refusals["model"] == 1
    assert cache.lookup(P, "how do I reset my password").value == "steps"  # same question: the check agrees


def test_chinese_paraphrase_hits_with_the_multilingual_embedder(e5):
    cache = SemanticCache(e5, threshold=0.85)  # low enough for the near miss to reach verification
    partition = ("acme", "faq", "", "zh", "generate:256")
    cache.insert(partition, "如何减肥", "少吃多动")
    assert cache.lookup(partition, "怎样减肥").value == "少吃多动"
    assert cache.lookup(partition, "如何增肥") is None and cache.refusals["antonym"] == 1


def test_a_hit_never_crosses_partitions():
    cache = SemanticCache(HashingEmbedder(), threshold=0.5)
    cache.insert(P, "How do I reset my password?", "tenant a answer")
    other = ("other-tenant",) + P[1:]
    assert cache.lookup(other, "How do I reset my password?") is None
    assert cache.lookup(P, "How do I reset my password?").value == "tenant a answer"


def test_insert_replaces_and_predictive_entries_are_marked():
    cache = SemanticCache(HashingEmbedder(), threshold=0.5)
    cache.insert(P, "What is jev?", "guess", predictive=True)
    hit = cache.lookup(P, "What is jev?")
    assert hit.predictive and hit.level == "l3"
    cache.insert(P, "what is  jev?", "real")
    assert len(cache) == 1 and cache.lookup(P, "What is jev?").value == "real"


def test_stale_semantic_hit_refreshes_once():
    book = VersionBook({"prompt": "1"})
    cache = SemanticCache(HashingEmbedder(), threshold=0.5, book=book)
    cache.insert(P, "What is jev?", "v1")
    book.bump("prompt", "2")
    assert cache.lookup(P, "What is jev?").stale
    assert cache.lookup(P, "What is jev?") is None
    assert len(cache.refresh) == 1


def test_entries_leave_the_collectors_scans():
    """Up to JEV_CACHE_SEMANTIC_MAX_ENTRIES answers stay in memory; every full collection scans what the collector
    tracks, so each is kept as bytes and read back whole."""
    import gc

    cache = SemanticCache(HashingEmbedder(), threshold=0.5)
    answers = {
        "How do I pay?": {"action_id": "card", "ranking": [{"id": "card", "score": 0.9}], "chain": ["fine"]},
        "我怎么付款?": {"action_id": "银行卡", "ranking": [{"id": "银行卡", "score": 0.8}], "chain": ["fine"]},
    }
    for question, answer in answers.items():
        cache.insert(P, question, answer)
    gc.collect()
    assert not any(gc.is_tracked(raw) for part in cache.partitions.values() for raw in part.entries.values())
    assert all(cache.lookup(P, question).value == answer for question, answer in answers.items())


def test_partition_of_keeps_constraints_apart():
    base = Request(request_id="1", tenant="t", service="s", decision_type="faq", state="How do I pay?")
    decide = Request(
        request_id="1",
        tenant="t",
        service="s",
        decision_type="faq",
        state="How do I pay?",
        candidates=[Candidate(id="a", text="card")],
    )
    chinese = Request(request_id="1", tenant="t", service="s", decision_type="faq", state="我怎么付款?")
    segment = Request(
        request_id="1",
        tenant="t",
        service="s",
        decision_type="faq",
        state={"question": "How do I pay?", "user_segment": "vip"},
    )
    keys = {partition_of(r) for r in (base, decide, chinese, segment)}
    assert len(keys) == 4
    assert partition_of(chinese)[3] == "zh" and partition_of(segment)[2] == "vip"


@pytest.mark.parametrize(
    "text,lang",
    [("hello", "latin"), ("你好", "zh"), ("こんにちは世界", "ja"), ("привет", "cyrillic"), ("안녕하세요", "ko")],
)
def test_language_of(text, lang):
    assert language_of(text) == lang


@pytest.mark.parametrize("max_exact", [1000, 20])
def test_index_removes_rows_and_rebuilds_hnsw_past_the_tombstone_fraction(max_exact):
    pytest.importorskip("faiss", reason="the ann extra is not installed") if max_exact == 20 else None
    rows = unit(np.random.default_rng(2).standard_normal((60, 16)))
    index = VectorIndex(16, max_exact=max_exact)
    ids = list(index.add(rows))
    for id_ in ids[:30]:
        index.remove(id_)
        assert all(found != id_ for found, _ in index.search(rows[id_], 5))
    index.settle()
    assert len(index) == 30 and (index.rebuilds > 0) == (max_exact == 20)
    assert index.size < 60 and len(index.dead) == index.size - 30  # removed rows freed, the rest tombstoned
    for id_ in ids[30:]:
        best, score = index.search(rows[id_], 3)[0]
        assert best == id_ and score == pytest.approx(1.0, abs=1e-5)


class HeldRebuilds:
    """An executor that runs a rebuild only when released: what the index does while one is in progress."""

    def __init__(self):
        self.jobs = []

    def submit(self, fn, *args):
        future = Future()
        self.jobs.append((future, fn, args))
        return future

    def release(self):
        jobs, self.jobs = self.jobs, []
        for future, fn, args in jobs:
            future.set_result(fn(*args))


def test_rows_added_and_removed_during_a_rebuild_carry_over(monkeypatch):
    pytest.importorskip("faiss", reason="the ann extra is not installed")
    held = HeldRebuilds()
    monkeypatch.setattr(index_module, "_REBUILDER", held)
    monkeypatch.setattr(index_module, "CATCH_UP", 2)
    rows = unit(np.random.default_rng(4).standard_normal((45, 16)))
    index = VectorIndex(16, max_exact=10)
    ids = list(index.add(rows[:40]))
    for id_ in ids[:11]:
        index.remove(id_)
    assert index.building is not None and index.kind == "hnsw"
    ids += list(index.add(rows[40:]))
    removed = set(ids[:11]) | {ids[20], ids[21], ids[42]}
    for id_ in (ids[20], ids[21], ids[42]):
        index.remove(id_)
    held.release()
    assert [index.search(rows[i], 1)[0][0] for i in (30, 41)] == [ids[30], ids[41]]  # still the old index:
    assert index.rebuilds == 0 and len(held.jobs) == 1  # 5 rows added meanwhile go in a catch-up round first
    held.release()
    assert [index.search(rows[i], 1)[0][0] for i in (30, 41)] == [ids[30], ids[41]]  # swapped in by this call
    assert index.building is None and index.rebuilds == 1 and index.size == 29 + 5 and len(index) == 31
    for i, id_ in enumerate(ids):
        found = [f for f, _ in index.search(rows[i], 3)]
        assert (id_ in found) == (id_ not in removed)


@pytest.mark.parametrize("max_exact", [1000, 8])
def test_size_cap_evicts_least_recently_hit(max_exact):
    pytest.importorskip("faiss", reason="the ann extra is not installed") if max_exact == 8 else None
    rows = unit(np.random.default_rng(3).standard_normal((200, 32)))
    embedder = HashingEmbedder(32)
    cache = SemanticCache(embedder, threshold=0.9, verify=False, max_exact=max_exact, max_entries=20)
    other = ("other-tenant",) + P[1:]
    texts = [f"question {i}" for i in range(200)]
    cache.insert(P, texts[0], 0, vector=rows[0])
    for i in range(1, 200):
        cache.insert(other if i % 3 else P, texts[i], i, vector=rows[i])
        assert cache.lookup(P, texts[0], rows[0]).value == 0  # hit every time: never the least recent
        assert len(cache) <= 20
    assert len(cache) == 20 and cache.evictions == 180
    survivors = {part.entry(id_).value for part in cache.partitions.values() for id_ in part.entries}
    assert 0 in survivors and set(range(181, 200)) <= survivors  # the hit one and the 19 newest
    for i in range(200):
        hit = cache.lookup(P if i % 3 == 0 else other, texts[i], rows[i])
        assert (hit is not None and hit.value == i) == (i in survivors)
    for part in cache.partitions.values():
        part.index.settle()
    if max_exact == 8:
        assert any(p.index.rebuilds for p in cache.partitions.values())
    assert all(cache.lookup(P if i % 3 == 0 else other, texts[i], rows[i]).value == i for i in survivors)


def test_emptied_partition_is_dropped():
    cache = SemanticCache(HashingEmbedder(), threshold=0.5, max_entries=1)
    cache.insert(P, "What is jev?", "a")
    cache.insert(("other",) + P[1:], "What is jev?", "b")
    assert list(cache.partitions) == [("other",) + P[1:]] and cache.lookup(P, "What is jev?") is None


@pytest.mark.parametrize(
    "texts",
    [
        (
            "How do I reset my password?",
            "How can I reset my password?",
            "How do I reset my modem?",
            "How could I reset my password?",
        ),
        ("如何重置我的密码？", "怎么重置我的密码？", "如何重置我的调制解调器？", "请问如何重置我的密码？"),
    ],
    ids=["en", "zh"],
)
def test_a_promoted_key_is_no_rival_of_its_target_in_the_margin_feature(texts):
    """The verifier reads how far the next neighbour lies behind as ambiguity; a key promoted to the same answer
    is that answer, so the margin is measured to the next other answer."""
    from streams.cache.evidence import PooledEvidence
    from streams.cache.learning import ThresholdLearner
    from streams.cache.verifier import FEATURES, Verifier

    target, alias, rival, asked = texts
    embedder = HashingEmbedder()
    evidence = PooledEvidence(Verifier(np.zeros(len(FEATURES))), ThresholdLearner(0.05, 0.9, explore=0.0))
    cache = SemanticCache(embedder, threshold=0.0, evidence=evidence)
    cache.insert(P, target, "A")
    cache.insert(P, rival, "B")
    before = cache.probe(P, asked)[1]
    assert cache.promote(P, alias, target).alias_of == target
    after = cache.probe(P, asked)[1]
    vectors = dict(zip(texts, embedder.embed(list(texts))))
    cosines = sorted(((float(vectors[asked] @ vectors[t]), t) for t in (target, alias, rival)), reverse=True)
    best, answer = cosines[0][0], cosines[0][1] in (target, alias)
    assert cosines[1][1] in (target, alias), "the next neighbour is the same answer: the case this is about"
    assert answer and after.question == cosines[0][1] and after.cosine == pytest.approx(best, abs=1e-6)
    margin = dict(zip(FEATURES, after.features))["margin"]
    assert margin == pytest.approx(best - float(vectors[asked] @ vectors[rival]), abs=1e-6)
    assert dict(zip(FEATURES, before.features))["margin"] == pytest.approx(
        before.cosine - float(vectors[asked] @ vectors[rival]), abs=1e-6
    )


@pytest.mark.parametrize(
    "texts",
    [
        (
            "quiet coffee machine for a small office",
            "silent coffee maker for a small office",
            "please find a quiet coffee machine for a small office",
        ),
        ("适合小办公室的静音咖啡机", "小办公室用的静音咖啡机", "帮我找适合小办公室的静音咖啡机"),
    ],
    ids=["en", "zh"],
)
def test_neighbours_serving_the_same_decision_are_no_rivals_in_the_margin_feature(texts):
    """Two wordings cached with the same chosen action leave the neighbourhood unambiguous (margin: the cosine
    itself, no rival); cached with different actions, the second is a rival and the margin shrinks to the gap."""
    from streams.cache.evidence import PooledEvidence
    from streams.cache.learning import ThresholdLearner
    from streams.cache.verifier import FEATURES, Verifier

    first, second, asked = texts
    embedder = HashingEmbedder()
    vectors = dict(zip(texts, embedder.embed(list(texts))))
    cosines = {t: float(vectors[asked] @ vectors[t]) for t in (first, second)}

    def margin(second_action: str) -> tuple[float, float]:
        evidence = PooledEvidence(Verifier(np.zeros(len(FEATURES))), ThresholdLearner(0.05, 0.9, explore=0.0))
        cache = SemanticCache(embedder, threshold=0.0, evidence=evidence, verify=False)
        cache.insert(P, first, {"action_id": "sku-1", "request_id": "r-1"})
        cache.insert(P, second, {"action_id": second_action, "request_id": "r-2"})
        candidate = cache.probe(P, asked)[1]
        return candidate.cosine, dict(zip(FEATURES, candidate.features))["margin"]

    best, same = margin("sku-1")
    assert best == pytest.approx(max(cosines.values()), abs=1e-6) and same == pytest.approx(best, abs=1e-6)
    best, other = margin("sku-2")
    assert other == pytest.approx(best - min(cosines.values()), abs=1e-6) and other < same
