"""The lexical engine: BM25 of each candidate against the context as the query. No model, no model tokens; the
cascade's coarse tier and the fallback ranking."""
from __future__ import annotations

import math
from collections import Counter

from streams import language
from streams.backends.protocol import Scored


def words(text: str) -> list[str]:
    """The word units the lexical tier compares: words, and character bigrams of CJK text (streams.language)."""
    return language.units(text)


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


def scorer(spec) -> LexicalBackend:
    return LexicalBackend()
