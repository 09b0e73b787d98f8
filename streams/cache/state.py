"""State-encoding cache for decisions: a hash of the state features maps to the encoded state.

The encoding is whatever the scoring tier re-uses for a repeated state: coarse-model embeddings now,
the prompt prefix a GPU backend keeps in its prefix cache later. A repeated state costs no re-encoding,
and its tokens are reported as cache_read tokens (a subset of input tokens, as in OTel GenAI).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from streams.cache.exact import BoundedLRU


@dataclass(frozen=True)
class Encoded:
    value: Any
    input_tokens: int
    cache_read_tokens: int


def state_hash(features: Any) -> str:
    data = orjson.dumps(features, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class StateEncodingCache:
    def __init__(self, encode: Callable[[list[str]], list], count_tokens: Callable[[str], int],
                 max_entries: int = 50_000):
        self.encode = encode
        self.count_tokens = count_tokens
        self.entries = BoundedLRU(max_entries)  # state hash -> (encoding, tokens)

    def get_many(self, states: list[Any]) -> list[Encoded]:
        """Encode a micro-batch of states; states seen before (or twice in the batch) are cache reads."""
        keys = [state_hash(s) for s in states]
        texts = {k: s if isinstance(s, str) else orjson.dumps(s, option=orjson.OPT_SORT_KEYS).decode()
                 for k, s in zip(keys, states)}
        missing = [k for k in dict.fromkeys(keys) if k not in self.entries]
        known = {k: self.entries.get(k) for k in keys if k not in missing}
        for key, value in zip(missing, self.encode([texts[k] for k in missing]) if missing else []):
            known[key] = self.entries[key] = (value, self.count_tokens(texts[key]))
        out, fresh = [], set(missing)
        for key in keys:
            value, n = known[key]
            out.append(Encoded(value, n, 0 if key in fresh else n))
            fresh.discard(key)
        return out

    def get(self, state: Any) -> Encoded:
        return self.get_many([state])[0]
