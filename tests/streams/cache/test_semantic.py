import numpy as np
import pytest

from schemas.records import Candidate, Request
from streams.cache.embedders import HashingEmbedder
from streams.cache.entry import VersionBook
from streams.cache.index import VectorIndex
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


def test_partition_of_keeps_constraints_apart():
    base = Request(request_id="1", tenant="t", service="s", decision_type="faq", state="How do I pay?")
    decide = Request(request_id="1", tenant="t", service="s", decision_type="faq", state="How do I pay?",
                     candidates=[Candidate(id="a", text="card")])
    chinese = Request(request_id="1", tenant="t", service="s", decision_type="faq", state="我怎么付款?")
    segment = Request(request_id="1", tenant="t", service="s", decision_type="faq",
                      state={"question": "How do I pay?", "user_segment": "vip"})
    keys = {partition_of(r) for r in (base, decide, chinese, segment)}
    assert len(keys) == 4
    assert partition_of(chinese)[3] == "zh" and partition_of(segment)[2] == "vip"


@pytest.mark.parametrize("text,lang", [
    ("hello", "latin"), ("你好", "zh"), ("こんにちは世界", "ja"), ("привет", "cyrillic"), ("안녕하세요", "ko")])
def test_language_of(text, lang):
    assert language_of(text) == lang
