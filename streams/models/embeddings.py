"""MiniLM bi-encoder (the `embed` extra): cosine of state and candidate embeddings.

Embeddings go through the process's encoding cache (streams/core/encodings.py): a state or candidate is encoded once
and a repeated one is a cache read, not new model input. `score_many` encodes every context and
candidate of a micro-batch of decisions in one model call.
"""

from __future__ import annotations

from streams.core import encodings
from streams.models import loaded as models
from streams.models.protocol import Scored


class MiniLMBackend:
    name = "minilm"
    model = "all-MiniLM-L6-v2"
    temperature = 0.05  # cosine differences of a few hundredths are decisive

    def __init__(self):
        self.encoder = models.minilm()

    def tokens(self, texts: list[str]) -> list[int]:
        """Each text's tokens as the model reads it, in one tokenizer call."""
        return self.encoder.lengths(texts)

    def embed(self, texts: list[str]):
        """Forward passes packed by length (models.Serialized.encode_packed): a decision's short candidates share
        a pass and its long context pads nothing, however few decisions a call holds."""
        return self.encoder.encode_packed(texts)

    def score(self, context: str, candidates: list[str]) -> Scored:
        return self.score_many([(context, candidates)])[0]

    def score_many(self, items: list[tuple[str, list[str]]]) -> list[Scored]:
        return cosine_scored(self, items)


def cosine_scored(encoder, items: list[tuple[str, list[str]]], query: str = "", passage: str = "") -> list[Scored]:
    """Each decision's candidates scored by cosine to its context, for a bi-encoder with `model`, and `embed` and
    `tokens` over a list of texts (prefixed with `query` / `passage` where the model was trained so). Every text of
    every decision goes through one encoding-cache lookup, so one encoder call: a text met earlier in the batch is a
    cache read for the later decision, as it would be one decision after another."""
    texts = [text for context, candidates in items for text in (query + context, *(passage + c for c in candidates))]
    encoded = encodings.shared().get_many(encoder.model, texts, encoder.embed, encoder.tokens)
    results, at = [], 0
    for _, candidates in items:
        state, *cands = everything = encoded[at : at + 1 + len(candidates)]
        at += len(everything)
        results.append(
            Scored(
                [float(e.value @ state.value) for e in cands],
                input_tokens=sum(e.input_tokens for e in everything),
                cache_read_tokens=sum(e.cache_read_tokens for e in everything),
            )
        )
    return results


def scorer(spec) -> MiniLMBackend:
    return MiniLMBackend()
