"""MiniLM bi-encoder (the `embed` extra): cosine of state and candidate embeddings.

Embeddings go through the state-encoding cache (streams/cache/state.py): the state is encoded once and a
repeated state or candidate is a cache read, not new model input.
"""
from __future__ import annotations

from streams import models
from streams.cache.state import StateEncodingCache
from streams.scoring.backends import Scored


class MiniLMBackend:
    name = "minilm"
    model = "all-MiniLM-L6-v2"
    temperature = 0.05  # cosine differences of a few hundredths are decisive

    def __init__(self, cache_size: int = 50_000):
        self.encoder = models.minilm()
        self.tokenizer = self.encoder.tokenizer
        self.states = StateEncodingCache(self.embed, self.tokens, cache_size)

    def tokens(self, text: str) -> int:
        return min(len(self.tokenizer(text, add_special_tokens=True)["input_ids"]), self.encoder.max_seq_length)

    def embed(self, texts: list[str]):
        return self.encoder.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    def score(self, context: str, candidates: list[str]) -> Scored:
        state, *encoded = self.states.get_many([context, *candidates])
        everything = [state, *encoded]
        return Scored([float(e.value @ state.value) for e in encoded],
                      input_tokens=sum(e.input_tokens for e in everything),
                      cache_read_tokens=sum(e.cache_read_tokens for e in everything))
