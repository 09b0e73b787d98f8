"""The key terms of a text in any script: what a reworded question must keep to still be the same question.

A paraphrase may change every other word, but not the thing it names: identifiers (INV-0004, A320), numbers by
value (三晚 and 3晚), quoted and titled terms (“…”, 《…》), Latin-script names inside CJK text, and CJK places by
their suffix (北京饭店). The lists live in streams/text/lang/; the cache's word-level checks (streams/cache/guards.py)
read English names and rare words.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from streams.text import language

# a letter run holding digits, not inside a longer Latin word (订单A320 counts: Han is no word boundary for \b)
IDENTIFIER = re.compile(r"(?<![A-Za-z0-9])[A-Za-z][A-Za-z_-]*\d[A-Za-z0-9_-]*")
QUOTED = re.compile(
    r'"([^"\n]{1,40})"|“([^”\n]{1,40})”|‘([^’\n]{1,40})’|「([^」\n]{1,40})」|『([^』\n]{1,40})』'
    r"|《([^》\n]{1,40})》|〈([^〉\n]{1,40})〉"
)
LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#.&'-]*[A-Za-z0-9+#]|[A-Za-z]")
HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
PLACE_CHARS = 4  # a place is named by its last characters: 订北京饭店 and 北京饭店 name one hotel


@functools.cache
def place() -> re.Pattern:
    """A named place: one to ten Han characters, the last not a particle or demonstrative, then a place suffix
    (北京饭店; not 什么类型的酒店)."""
    suffixes = sorted(language.lexicon("zh").data.get("place_suffixes", "").split(), key=len, reverse=True)
    return re.compile(f"[\u4e00-\u9fff]{{1,10}}[^\\W\\d_的个家些么啥哪这那]({'|'.join(suffixes)})")


def key_terms(text: str) -> set[str]:
    """The key terms of `text`, normalized (NFKC, case-folded; numbers as `#value`)."""
    text = unicodedata.normalize("NFKC", text)
    ids = {m.group().casefold() for m in IDENTIFIER.finditer(text)}
    rest = IDENTIFIER.sub(" ", text)  # an identifier's digits are not also a quantity
    terms = ids | {f"#{v}" for v in language.numbers(rest)}
    terms |= {next(g for g in m.groups() if g).strip().casefold() for m in QUOTED.finditer(text)}
    if HAN.search(text):
        terms |= {w.casefold() for w in LATIN_WORD.findall(rest) if language.stem(w) not in _english_stop()}
        terms |= {m.group()[-PLACE_CHARS:] for m in place().finditer(text)}
    return terms


@functools.cache
def _english_stop() -> frozenset[str]:
    return language.lexicon("en").stopwords


def missing(a: str, b: str) -> set[str]:
    """Key terms of `a` that `b` does not hold: neither among b's key terms nor written in b (case-folded), so a
    place named in `a` and written inside a longer phrase in `b` is kept."""
    folded = unicodedata.normalize("NFKC", b).casefold()
    theirs = key_terms(b)
    return {t for t in key_terms(a) if t not in theirs and (t.startswith("#") or t not in folded)}


def differ(a: str, b: str) -> bool:
    """Whether either text names a key term the other lacks."""
    return bool(missing(a, b) or missing(b, a))
