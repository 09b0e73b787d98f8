"""Per-level hit rates and tokens saved, with predictive (L3) hits and their prefetch cost kept apart."""
from __future__ import annotations

from collections import Counter

from streams.cache.entry import Hit

LEVELS = ("l1", "l2", "l3")


class CacheStats:
    def __init__(self):
        self.lookups = 0
        self.hits: Counter[str] = Counter()
        self.stale_hits = 0
        self.tokens_saved: Counter[str] = Counter()
        self.prefetches = 0
        self.prefetch_tokens = 0  # what pre-answering cost, whether or not it was ever hit

    def record(self, hit: Hit | None) -> None:
        """Call once per request after the lookup of every level (None: a miss at all levels)."""
        self.lookups += 1
        if hit is None:
            return
        self.hits[hit.level] += 1
        self.stale_hits += hit.stale
        self.tokens_saved[hit.level] += hit.entry.tokens

    def record_prefetch(self, tokens: int) -> None:
        self.prefetches += 1
        self.prefetch_tokens += tokens

    def summary(self) -> dict:
        rate = {f"{level}_hit_rate": self.hits[level] / self.lookups if self.lookups else 0.0 for level in LEVELS}
        return {"lookups": self.lookups, **rate, **{f"{level}_tokens_saved": self.tokens_saved[level]
                                                    for level in LEVELS},
                "stale_hits": self.stale_hits, "l3_prefetches": self.prefetches,
                "l3_prefetch_tokens": self.prefetch_tokens,
                "l3_net_tokens_saved": self.tokens_saved["l3"] - self.prefetch_tokens}
