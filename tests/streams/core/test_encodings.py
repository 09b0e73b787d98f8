"""The encoding cache: model + text keys, a memory bound, hits as cache-read tokens, and scores identical to no
cache at all."""

import numpy as np
import pytest
from prometheus_client import REGISTRY

from streams.core import encodings
from streams.core.encodings import ENTRY_OVERHEAD, EncodingCache
from streams.models.loaded import available

DIM = 8


class Model:
    """A deterministic encoder that records what it was asked to encode, as one batch array (rows are views)."""

    def __init__(self, salt: int = 0):
        self.salt, self.calls = salt, []

    def __call__(self, texts):
        self.calls.append(list(texts))
        return np.array([[(len(t) * (i + 1) + self.salt) % 7 for i in range(DIM)] for t in texts], dtype=np.float32)


def words(texts: list[str]) -> list[int]:
    return [len(text.split()) for text in texts]


def test_repeats_in_a_call_and_across_calls_are_reads_and_encoded_once():
    cache, model = EncodingCache(2**20), Model()
    first = cache.get_many("m", ["hold the order", "ship now", "hold the order"], model, words)
    assert model.calls == [["hold the order", "ship now"]]
    assert [(e.input_tokens, e.cache_read_tokens) for e in first] == [(3, 0), (2, 0), (3, 3)]
    again = cache.get_many("m", ["ship now", "block the payment"], model, words)
    assert model.calls[-1] == ["block the payment"]
    assert (again[0].input_tokens, again[0].cache_read_tokens) == (2, 2)
    assert np.array_equal(again[0].value, first[1].value)
    assert (cache.hits, cache.misses) == (2, 3) and cache.hit_ratio() == pytest.approx(0.4)


def test_models_never_share_an_entry():
    cache, a, b = EncodingCache(2**20), Model(0), Model(3)
    cache.get_many("a", ["same text"], a, words)
    from_b = cache.get_many("b", ["same text"], b, words)
    assert b.calls == [["same text"]] and from_b[0].cache_read_tokens == 0
    assert not np.array_equal(from_b[0].value, a(["same text"])[0])


def test_memory_bound_evicts_the_least_recently_used_and_counts_each_entry_alone():
    entry = DIM * 4 + ENTRY_OVERHEAD  # a float32 row, copied out of its batch, plus the overhead
    cache, model = EncodingCache(2 * entry), Model()
    cache.get_many("m", ["a", "bb", "ccc"], model, words)
    assert cache.bytes == 2 * entry and cache.evictions == 1 and len(cache.entries) == 2
    assert all(value.base is None for value, _, _ in cache.entries.values())
    cache.get_many("m", ["bb"], model, words)  # bb is now the newest
    cache.get_many("m", ["dddd"], model, words)
    model.calls.clear()
    cache.get_many("m", ["bb", "ccc"], model, words)
    assert model.calls == [["ccc"]]  # ccc was evicted, bb kept


def test_off_encodes_everything_and_reads_nothing():
    cache, model = EncodingCache(0), Model()
    out = cache.get_many("m", ["x y", "x y"], model, words)
    assert model.calls == [["x y", "x y"]] and [e.cache_read_tokens for e in out] == [0, 0]
    assert not cache.entries and cache.hits == cache.misses == 0


def test_hit_ratio_and_evictions_are_exported_by_model():
    cache, model = EncodingCache(DIM * 4 + ENTRY_OVERHEAD), Model()

    def value(name, **labels):
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = value("jev_encoding_cache_lookups_total", model="metrics-test", result="hit")
    evicted = value("jev_encoding_cache_evictions_total", model="metrics-test")
    cache.get_many("metrics-test", ["one", "one", "two"], model, words)
    assert value("jev_encoding_cache_lookups_total", model="metrics-test", result="hit") == before + 1
    assert value("jev_encoding_cache_evictions_total", model="metrics-test") == evicted + 1
    assert value("jev_encoding_cache_hit_ratio", model="metrics-test") == pytest.approx(1 / 3)
    assert value("jev_encoding_cache_bytes") == cache.bytes


def test_a_negative_size_names_the_setting():
    with pytest.raises(ValueError, match="JEV_ENCODING_CACHE_MB"):
        encodings.configure(-1)


@pytest.mark.skipif(not available("minilm"), reason="the embed extra (MiniLM) is not installed")
def test_minilm_scores_are_identical_with_and_without_the_cache():
    """Identical up to float32 rounding: a batched encoder's output moves in the 7th digit with the padding of
    the batch a text ran in (a cached encoding ran in an earlier batch), with or without the cache; the ranking
    of every decision's candidates is the same."""
    from streams.models.embeddings import MiniLMBackend

    actions = ["hold the transfer", "review by hand", "block the payment", "ship from warehouse B"]
    items = [
        ("SKU A1 stock 3 at warehouse B, demand 40 units this week", actions),
        ("仓库B的A1库存为3件,本周需求40件", ["暂停调拨", "人工审核", "拦截支付"]),
        ("payment of 900 EUR from a new device at 3am", actions),
        ("SKU A1 stock 3 at warehouse B, demand 40 units this week", actions[:2]),
    ]
    try:
        encodings.configure(0)
        backend = MiniLMBackend()
        off = [backend.score_many(items[:2]), backend.score_many(items[2:])]
        encodings.configure(64)
        on = [backend.score_many(items[:2]), backend.score_many(items[2:])]
        hit_ratio = encodings.shared().hit_ratio()
    finally:
        encodings.configure(64)
    for uncached, cached in zip([s for batch in off for s in batch], [s for batch in on for s in batch]):
        assert cached.scores == pytest.approx(uncached.scores, abs=1e-6)
        assert np.argsort(cached.scores).tolist() == np.argsort(uncached.scores).tolist()
        assert cached.input_tokens == uncached.input_tokens and uncached.cache_read_tokens == 0
    assert on[1][1].cache_read_tokens == on[1][1].input_tokens  # its state and candidates all met before
    assert hit_ratio == pytest.approx(7 / 17)  # batch 1: none of 9 texts met before; batch 2: 7 of 8
