"""Domain layer: drop turns led by the exclusion terms of the request's domain.

A turn is off-domain when an exclusion term (business dictionary of the decision type) is among the
turn's top TF-IDF keywords (IDF over the turns of this history, so a term in passing does not count)
and the turn mentions in-domain terms less often than exclusion terms.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

import ahocorasick

WORD = re.compile(r"[a-z][a-z0-9'_-]{2,}")
CJK = re.compile(r"[\u4e00-\u9fff]")
STOPWORDS = frozenset(
    "the and for are but not you your with this that have from they will would there their what about "
    "which when make can like just know how some could them than then into only also its was were been "
    "has had our out all any may more most other such very should here where who why".split()
)


@functools.lru_cache(maxsize=64)
def automaton(terms: tuple[str, ...]):
    auto = ahocorasick.Automaton()
    for term in terms:
        auto.add_word(term, term)
    auto.make_automaton()
    return auto


def _hits(terms: tuple[str, ...], text: str) -> Counter:
    return Counter(term for _, term in automaton(terms).iter(text)) if terms else Counter()


def off_domain(
    contents: list[str], candidates: list[int], exclude: tuple[str, ...], include: tuple[str, ...], top_k: int
) -> dict[int, str]:
    """{index: the exclusion term that leads it} for the candidate turns that are off-domain."""
    if not exclude:
        return {}
    lowered: dict[int, str] = {}
    out: dict[int, str] = {}
    for i in candidates:
        low = lowered.setdefault(i, contents[i].lower())
        bad = _hits(exclude, low)
        if not bad or sum(_hits(include, low).values()) >= sum(bad.values()):
            continue
        counts = Counter(w for w in WORD.findall(low) if w not in STOPWORDS)
        for term, n in bad.items():  # multi-word and Chinese terms are not words of the regex
            counts[term] = max(counts[term], n)
        total = sum(counts.values()) + len(CJK.findall(low)) // 2
        all_low = [lowered.setdefault(j, contents[j].lower()) for j in range(len(contents))]

        def tfidf(term: str, n: int, total: int = total, all_low: list[str] = all_low) -> float:
            df = sum(1 for text in all_low if term in text)
            return n / total * (math.log((1 + len(all_low)) / (1 + df)) + 1)

        pool = dict(counts.most_common(4 * top_k))
        pool.update(bad)
        # ties go to ordinary words: an exclusion term must outrank them to lead the turn
        top = sorted(pool, key=lambda term: (tfidf(term, counts[term]), term not in bad), reverse=True)[:top_k]
        leading = [term for term in top if term in bad]
        if leading:
            out[i] = leading[0]
    return out
