"""Optional MiniLM tagger (the `embed` extra): re-tags short user turns the rules left as plain requests
when they sit close to prototypes of venting, small talk or information. Never required: without the
extra, `tagger()` returns None and the rules stand alone."""

from __future__ import annotations

import functools
import logging

import numpy as np

PROTOTYPES = {
    "venting": [
        "This is so frustrating, nothing works and I am fed up.",
        "I am really angry about how bad this service is.",
        "Honestly this is the worst experience I have ever had.",
    ],
    "chit-chat": [
        "Hi there, how are you doing today?",
        "Thanks a lot, have a nice day!",
        "Haha that's funny, good talking to you.",
    ],
    "information": [
        "For context, my account was opened in 2019 and I live in Berlin.",
        "Here are the details: the order number is 55120 and it shipped on Monday.",
        "Just so you know, our team uses Python 3.11 and PostgreSQL.",
    ],
}
MAX_CHARS = 300
log = logging.getLogger(__name__)


class MiniLMTagger:
    def __init__(self, threshold: float = 0.33):
        from streams.cache.embedders import MiniLMEmbedder

        self.embedder = MiniLMEmbedder()
        self.threshold = threshold
        self.labels = [tag for tag, texts in PROTOTYPES.items() for _ in texts]
        self.prototypes = self.embedder.embed([t for texts in PROTOTYPES.values() for t in texts])

    def retag(self, roles: list[str], contents: list[str], tags: list[str]) -> list[str]:
        """`tags` with short user requests moved to the nearest prototype's tag when it is close enough."""
        picks = [
            i
            for i, (role, tag) in enumerate(zip(roles, tags))
            if role == "user" and tag == "resolved" and len(contents[i]) <= MAX_CHARS
        ]
        if not picks:
            return tags
        sims = self.embedder.embed([contents[i] for i in picks]) @ self.prototypes.T
        out = list(tags)
        for row, i in enumerate(picks):
            best = int(np.argmax(sims[row]))
            if sims[row, best] >= self.threshold:
                out[i] = self.labels[best]
        return out


@functools.lru_cache(maxsize=1)
def tagger() -> MiniLMTagger | None:
    """The shared MiniLM tagger, or None (logged once) when the embed extra is not installed."""
    try:
        return MiniLMTagger()
    except RuntimeError as exc:
        log.warning("distill: MiniLM tagger unavailable, using the rules only (%s)", exc)
        return None
