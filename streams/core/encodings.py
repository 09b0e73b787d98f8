"""The encoding cache of a process: a text's encoding by a model, reused across requests and micro-batches.

Keyed by model and a hash of the text, bounded by memory (JEV_ENCODING_CACHE_MB, least recently used first), so
a state or candidate met again is a cache read instead of model input. A read returns the very array the model
produced, so scores are identical with and without the cache; its tokens are metered as cache_read tokens. One
cache per process (`shared()`, sized once by `configure`).
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from streams.core import metrics

ENTRY_OVERHEAD = 240  # bytes per entry beyond its encoding: key tuple, digest, OrderedDict node, token count


@dataclass(frozen=True)
class Encoded:
    value: Any
    input_tokens: int
    cache_read_tokens: int


def text_key(model: str, text: str) -> tuple[str, bytes]:
    return model, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def entry_bytes(value: Any) -> int:
    return int(getattr(value, "nbytes", 0) or sys.getsizeof(value)) + ENTRY_OVERHEAD


def owned(value: Any) -> Any:
    """A row of a batch's array as its own array: a view would keep the whole batch alive, uncounted."""
    return value.copy() if getattr(value, "base", None) is not None else value


class EncodingCache:
    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"the encoding cache's size must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[str, bytes], tuple[Any, int, int]] = OrderedDict()  # (value, tokens, bytes)
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0
        self.lock = threading.Lock()  # the scoring worker's naive (shadow) engine shares the process's models

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def hit_ratio(self) -> float:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else 0.0

    def get_many(
        self,
        model: str,
        texts: list[str],
        encode: Callable[[list[str]], Any],
        count_tokens: Callable[[list[str]], list[int]],
    ) -> list[Encoded]:
        """Each text's encoding by `model`, in order: the texts not cached (each once, however often it occurs)
        in one `encode` call and one `count_tokens` call (a tokenizer call per text cost the model path 3% of its
        encoder time); a text cached, or met earlier in `texts`, is a cache read."""
        if not self.enabled:
            if not texts:
                return []
            return [Encoded(v, n, 0) for v, n in zip(encode(texts), count_tokens(texts))]
        with self.lock:
            keys = [text_key(model, t) for t in texts]
            known = {k: self.entries[k] for k in keys if k in self.entries}
            missing = {k: t for k, t in zip(keys, texts) if k not in known}
            if missing:
                fresh_texts = list(missing.values())
                for key, value, tokens in zip(missing, encode(fresh_texts), count_tokens(fresh_texts)):
                    value = owned(value)
                    known[key] = (value, tokens, entry_bytes(value))
            out, fresh = [], set(missing)
            for key in keys:
                value, tokens, _ = known[key]
                out.append(Encoded(value, tokens, 0 if key in fresh else tokens))
                fresh.discard(key)
            misses, hits = len(missing), len(texts) - len(missing)
            self.store(known)
            evicted = self.shrink()
            self.hits += hits
            self.misses += misses
            metrics.observe_encoding_cache(model, hits, misses, evicted, self.hit_ratio(), self.bytes)
            return out

    def store(self, known: dict) -> None:
        """This call's encodings become the newest entries (an entry larger than the whole cache is not kept)."""
        for key, entry in known.items():
            if key in self.entries:
                self.entries.move_to_end(key)
            elif entry[2] <= self.max_bytes:
                self.entries[key] = entry
                self.bytes += entry[2]

    def shrink(self) -> int:
        evicted = 0
        while self.bytes > self.max_bytes:
            _, (_, _, size) = self.entries.popitem(last=False)
            self.bytes -= size
            evicted += 1
        self.evictions += evicted
        return evicted

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.bytes = 0


_shared = EncodingCache(64 * 2**20)


def configure(megabytes: float) -> None:
    """Size the process's cache (JEV_ENCODING_CACHE_MB; 0 = off); what it held is dropped."""
    global _shared
    if megabytes < 0:
        raise ValueError(f"JEV_ENCODING_CACHE_MB={megabytes}: give the cache's memory in MB, or 0 to turn it off")
    _shared = EncodingCache(int(megabytes * 2**20))


def shared() -> EncodingCache:
    return _shared


@contextmanager
def using(cache: EncodingCache) -> Iterator[EncodingCache]:
    """`cache` as the process's cache inside the block (benchmarks that compare two ways, each with its own)."""
    global _shared
    saved, _shared = _shared, cache
    try:
        yield cache
    finally:
        _shared = saved
