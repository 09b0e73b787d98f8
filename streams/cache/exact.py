"""L1 exact cache key: a hash of the canonical request; and the bounded LRU the caches use.

The key covers what makes two requests the same question: model, normalized context (history kept by
distill + state), candidates, the context constraints and the template the request pins. Prompt, model and
template versions stay out of the key: each Entry records them (entry.py `serve`), so a bump makes entries
stale one by one, each served once while its refresh is queued - no mass expiry, no stampede.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import orjson

from schemas.records import Work
from streams.text.prompt import render_context


def normalize(text: str) -> str:
    """NFKC and collapsed whitespace: differences no model would answer differently. ASCII is its own NFKC form,
    and str.split() splits on exactly what `\\s` matches (str.isspace), so this is the regex's result at a fifth of
    its cost (one key per admitted request)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.split())


def canonical(work: Work) -> dict:
    request = work.request
    template = request.template
    return {
        "model": work.model,
        "context": normalize(work.context or render_context(request)),
        "candidates": sorted((c.id, normalize(c.text)) for c in request.candidates),
        "constraints": [
            request.tenant,
            request.decision_type,
            request.kind,
            request.contracts.max_output_tokens,
            request.contracts.min_output_tokens,
            *([request.question_type] if request.question_type else []),
        ],  # sets a stream's length
        "template": [template.id, template.version, template.variables] if template else None,
    }


def cache_key(work: Work) -> str:
    data = orjson.dumps(canonical(work), option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
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
