"""L1 exact cache: a hash of the canonical request, and a bounded LRU to hold entries in memory.

The key covers what makes two requests the same question: model, normalized context (history kept by
distill + state), candidates, the context constraints, the template the request pins, and the versions
passed in. Two ways to handle template/prompt/model versions announced on the control topic:
- pass them to `cache_key`: a bump changes every key, so old entries are never read again (they age out
  of the LRU) - simple, but every request misses at once after a bump;
- pass none, and record them in each Entry (entry.py `serve`): a bump makes entries stale one by one,
  each served once while its refresh is queued - no mass expiry, no stampede. Preferred.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import OrderedDict
from typing import Any, Iterator, Mapping

import orjson

from schemas.records import Work
from streams.cache.entry import Entry, Hit, RefreshQueue, VersionBook, serve
from streams.ingest.prompt import render_context

_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """NFKC and collapsed whitespace: differences no model would answer differently."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def canonical(work: Work) -> dict:
    request = work.request
    template = request.template
    return {
        "model": work.model,
        "context": normalize(work.context or render_context(request)),
        "candidates": sorted((c.id, normalize(c.text)) for c in request.candidates),
        "constraints": [request.tenant, request.decision_type, request.kind,
                        request.contracts.max_output_tokens, request.contracts.min_output_tokens],
        "template": [template.id, template.version, template.variables] if template else None,
    }


def cache_key(work: Work, versions: Mapping[str, str] | None = None) -> str:
    data = orjson.dumps({**canonical(work), "versions": dict(versions or {})},
                        option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class BoundedLRU:
    """A dict bounded to `max_entries`; reading or writing a key makes it the newest, the oldest is evicted."""

    def __init__(self, max_entries: int):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self.data: OrderedDict[Any, Any] = OrderedDict()
        self.evictions = 0

    def get(self, key, default=None):
        if key not in self.data:
            return default
        self.data.move_to_end(key)
        return self.data[key]

    def __setitem__(self, key, value) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.max_entries:
            self.data.popitem(last=False)
            self.evictions += 1

    def pop(self, key, default=None):
        return self.data.pop(key, default)

    def __contains__(self, key) -> bool:
        return key in self.data

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self) -> Iterator:
        return iter(self.data)


class ExactCache:
    """In-memory L1 (the stream stage keeps the same Entry dicts in a Faust table)."""

    def __init__(self, max_entries: int, book: VersionBook | None = None, refresh: RefreshQueue | None = None):
        self.entries = BoundedLRU(max_entries)
        self.book = VersionBook() if book is None else book
        self.refresh = RefreshQueue() if refresh is None else refresh

    def lookup(self, key: str) -> Hit | None:
        return serve(key, self.entries.get(key), self.book, self.refresh)

    def insert(self, key: str, value: Any, tokens: int = 0) -> Entry:
        entry = Entry(value, dict(self.book.current), tokens=tokens, level="l1")
        self.entries[key] = entry
        self.refresh.done(key)
        return entry
