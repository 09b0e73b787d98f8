from streams.cache.entry import Entry, Hit
from streams.cache.stats import CacheStats


def test_levels_and_predictive_cost_are_reported_apart():
    stats = CacheStats()
    stats.record(Hit("k1", Entry("a", tokens=100, level="l1")))
    stats.record(Hit("k2", Entry("b", tokens=40, level="l2"), stale=True))
    stats.record(Hit("k3", Entry("c", tokens=30, level="l3", predictive=True)))
    stats.record(None)
    stats.record_prefetch(70)
    s = stats.summary()
    assert s["lookups"] == 4
    assert (s["l1_hit_rate"], s["l2_hit_rate"], s["l3_hit_rate"]) == (0.25, 0.25, 0.25)
    assert (s["l1_tokens_saved"], s["l2_tokens_saved"], s["l3_tokens_saved"]) == (100, 40, 30)
    assert s["stale_hits"] == 1 and s["l3_prefetch_tokens"] == 70 and s["l3_net_tokens_saved"] == -40
