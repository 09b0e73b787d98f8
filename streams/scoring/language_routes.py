"""Which fine tier decides a request: the one its decision type names, else the one for its language.

English text goes to the fine tier (`tiers.fine`, MiniLM by default); text in any other language
(streams.text.language.detect on the context and the candidates) to the multilingual one (`tiers.fine_multilingual`,
multilingual-e5-small), so one pipeline serves mixed-language traffic. A decision type that names a tier
(`fine: <backend>` in decision_types.yaml) uses it for every language.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas.records import Work
from streams.models import loaded as models
from streams.models.protocol import Scorer
from streams.text import language

SAMPLE_CHARS = 2000  # the language is read from this much of the context and of the candidates


def request_language(work: Work) -> str:
    """The language of a decision's text: its context's end (the state comes last) and its first candidates."""
    candidates = " ".join(c.text for c in work.request.candidates[:8])
    return language.detect(work.context[-SAMPLE_CHARS:] + "\n" + candidates[:SAMPLE_CHARS])


@dataclass
class FineTiers:
    english: Scorer
    multilingual: Scorer | None = None  # None: the English tier serves every language
    by_type: dict[str, Scorer] = field(default_factory=dict)

    def choose(self, work: Work) -> Scorer:
        chosen = self.by_type.get(work.request.decision_type)
        if chosen is not None:
            return chosen
        if self.multilingual is None or request_language(work) in ("en", language.UNDETERMINED):
            return self.english
        return self.multilingual


def multilingual_name(configured: str) -> str:
    """`auto`: e5 where its extra is installed, else none (the English tier serves every language)."""
    if configured == "auto":
        return "e5" if models.available("e5") else "none"
    return configured
