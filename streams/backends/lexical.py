"""Scoring backends: score(context, candidates) → scores with exact token accounting.

Heavy backends (MiniLM, SmolLM2, vLLM) import their stacks lazily, so the base install runs with
the lexical backend alone.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from streams import models

WORD = re.compile(r"\w+", re.UNICODE)


@dataclass
class Scored:
    scores: list[float]
    input_tokens: int = 0
    cache_read_tokens: int = 0  # subset of input_tokens served from a cache (OTel GenAI semantics)
    output_tokens: int = 0


class Backend(Protocol):
    name: str
    model: str
    temperature: float  # scale of its scores, for the softmax confidence

    def score(self, context: str, candidates: list[str]) -> Scored: ...


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


class LexicalBackend:
    """BM25 of each candidate against the context as the query. Costs no model tokens."""

    name = "lexical"
    model = "bm25"
    temperature = 1.0

    def __init__(self, k1: float = 1.2, b: float = 0.75):
        self.k1, self.b = k1, b

    def score(self, context: str, candidates: list[str]) -> Scored:
        query = set(words(context))
        docs = [Counter(words(c)) for c in candidates]
        n = len(docs) or 1
        avg = sum(sum(d.values()) for d in docs) / n or 1.0
        df = Counter(t for d in docs for t in d if t in query)
        scores = []
        for d in docs:
            length = sum(d.values())
            s = 0.0
            for t in query & d.keys():
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                tf = d[t]
                s += idf * tf * (self.k1 + 1) / (tf + self.k1 * (1 - self.b + self.b * length / avg))
            scores.append(s)
        return Scored(scores)


def load(name: str) -> Backend:
    """Backend by name (`vllm:/model/dir` for vLLM); `auto` takes the best one installed. Models come from
    the registry (streams/models.py), so a backend shares its model with the rest of the process; a missing
    extra names its install."""
    name, _, model_path = name.partition(":")
    if name == "auto":
        name = "minilm" if models.available("minilm") else "lexical"
    if name == "lexical":
        return LexicalBackend()
    if name not in ("minilm", "smollm2", "vllm"):
        raise ValueError(f"unknown backend {name!r}: choose auto, lexical, minilm, smollm2 or vllm:/model/dir")
    models.require(name, "backend")
    if name == "minilm":
        from streams.backends.embeddings import MiniLMBackend

        return MiniLMBackend()
    if name == "smollm2":
        from streams.backends.smollm2 import CausalLMBackend

        return CausalLMBackend()
    if name == "vllm":
        from streams.backends.vllm import VLLMBackend

        if not model_path:
            raise RuntimeError("backend 'vllm' needs a local model directory: name it as vllm:/path/to/model")
        return VLLMBackend(model_path)
