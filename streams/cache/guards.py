"""Is a cached question really the same question? Checks on top of the cosine, each naming why it refuses.

Near-duplicate questions that mean something else usually differ by one word: a number or year, a negation, an
antonym, an ordinal, swapped roles, a narrower scope or a different key term. The checks read English and
Chinese (word lists in streams/text/lang/, key terms in streams/text/keyterms.py); the English name and rare-word
checks need words, so they run on Latin-script text only.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from streams.text import keyterms, language, tokens

_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d[\d,.]*(?:st|nd|rd|th)?|[^\W\d_]+", re.UNICODE)
_LATIN = re.compile(r"[A-Za-z]")
_HAN = re.compile(r"[\u4e00-\u9fff]")
_HAN_ONLY = re.compile(r"[\u4e00-\u9fff]+")

_EN, _ZH = language.lexicon("en").data, language.lexicon("zh").data
STOPWORDS = frozenset(_EN["stopwords"].split())
NEGATIONS = frozenset(_EN["negations"].split())
NUMBER_WORDS = {w: str(i) for i, w in enumerate(_EN["number_words"].split())} | {
    w: str(n) for w, n in (_EN["tens"] | _EN["big_numbers"]).items()
}
ORDINALS = {w: str(i) for i, w in enumerate(_EN["ordinals"].split())} | _EN["ordinal_words"]
SCOPE = frozenset(_EN["scope"].split())
SYMMETRIC = frozenset(_EN["symmetric"])
MAX_ROLE_SPAN = 3  # words between two swapped roles; farther apart it is clause order, not roles
DIRECTIONAL = sorted(_ZH["directional"].split(), key=len, reverse=True)
MAX_ZH_ROLE = 4  # characters of each side of a Chinese relation word compared (a place, a name, a pronoun)
RARE_RANK = 20_000  # a word that is one cl100k token with a lower rank is common English


def _alternation(words) -> re.Pattern:
    """A regex matching any of `words`, longest first (没有 before 没)."""
    return re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))))


_ZH_DIGITS, _ZH_UNITS = _ZH["numerals"], _ZH["units"]
_ZH_NUMERALS = "".join(_ZH_DIGITS) + "".join(_ZH_UNITS)
_ZH_NUMBER = re.compile(f"({re.escape(_ZH['percent'])})?([{_ZH_NUMERALS}]+)")
_ZH_ORDINAL = re.compile(f"{re.escape(_ZH['ordinal_prefix'])}\\s*([0-9]+|[{_ZH_NUMERALS}]+)")
_ZH_CLASSIFIER = _alternation(_ZH["classifiers"].split())
_ZH_NOT_NUMBER = _alternation(_ZH["not_numbers"].split())
_ZH_NOT_NEGATION = _alternation(_ZH["not_negations"].split())
_ZH_A_NOT_A = re.compile(f"(.)[{''.join(n for n in _ZH['negations'] if len(n) == 1)}]\\1")  # 是不是, 有没有
_ZH_NEGATION = _alternation(_ZH["negations"])
_EN_ASKS, _ZH_ASKS = _EN["question_words"], _ZH["question_words"]
_ZH_ASK = _alternation(_ZH_ASKS)


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


_stem = language.stem


# English pairs and groups compare stemmed words; Chinese ones are found as substrings (_Chinese.terms).
ANTONYMS = [(_stem(x), _stem(y)) for x, y in (p.split("/") for p in _EN["antonyms"].split())] + [
    tuple(p.split("/")) for p in _ZH["antonyms"].split()
]
EXCLUSIVE = [frozenset(map(_stem, group.split())) for group in _EN["exclusive"]] + [
    frozenset(group.split()) for group in _ZH["exclusive"]
]
_ZH_TERMS = frozenset(
    {w for pair in _ZH["antonyms"].split() for w in pair.split("/")}
    | {w for group in _ZH["exclusive"] for w in group.split()}
)


@functools.lru_cache(maxsize=100_000)
def _rare(word: str) -> bool:
    ids = tokens.for_model("cl100k_base").encode_ordinary(" " + word.lower())
    return len(ids) > 1 or ids[0] > RARE_RANK


_zh_value = language.zh_value


class _Chinese:
    """The numbers, ordinals, negations and antonym/exclusive terms of the Chinese in a text."""

    def __init__(self, text: str):
        self.ordinals = {_zh_value(m[1]) for m in _ZH_ORDINAL.finditer(text)}
        self.ordinals |= {value for word, value in _ZH["ordinal_words"].items() if word in text}
        self.rest = _ZH_ORDINAL.sub(" ", text)  # 第2 is an ordinal, not also the number 2
        self.numbers = set()
        for m in _ZH_NUMBER.finditer(_ZH_NOT_NUMBER.sub(" ", self.rest)):
            percent, run = m.groups()
            counted = _ZH_CLASSIFIER.match(m.string, m.end()) is not None and run != "一"  # 一个: "a", not 1
            if percent or len(run) > 1 or counted:
                self.numbers.add(_zh_value(run))
        self.negations = len(_ZH_NEGATION.findall(_ZH_A_NOT_A.sub(" ", _ZH_NOT_NEGATION.sub(" ", text))))
        self.terms = {w for w in _ZH_TERMS if w in text}


class _Parsed:
    def __init__(self, text: str):
        text = unicodedata.normalize("NFKC", text)
        zh = _Chinese(text) if _HAN.search(text) else None
        raw = _TOKEN.findall(zh.rest if zh else text)
        self.latin = bool(_LATIN.search(text))
        # An acronym keeps its case: "IT" is a field, "it" a stop word.
        self.words = [t if t.isupper() and len(t) > 1 and t.isalpha() else _stem(t) for t in raw]
        self.numbers = {self._number(t) for t in self.words if t[0].isdigit() and not self._ordinal(t)}
        self.numbers |= {NUMBER_WORDS[w] for w in self.words if w in NUMBER_WORDS}
        self.ordinals = {
            ORDINALS.get(w) or re.sub(r"\D", "", w) for w in self.words if w in ORDINALS or self._ordinal(w)
        }
        self.negations = sum(w in NEGATIONS or r.lower().endswith("n't") for w, r in zip(self.words, raw))
        self.content = [
            w
            for w in self.words
            if w not in STOPWORDS
            and w not in NEGATIONS
            and w not in NUMBER_WORDS
            and w not in ORDINALS
            and not w[0].isdigit()
        ]
        # Names (capitalized, acronyms) are key terms; a rare word is one only when it narrows the other side.
        self.names = {
            w
            for i, (w, t) in enumerate(zip(self.words, raw))
            if w in self.content and (t.isupper() and len(t) > 1 or i > 0 and t[0].isupper())
        }
        self.key = self.names | {w for w in self.content if _rare(w)}
        self.scoped = {w for prev, w in zip(self.words, self.words[1:]) if prev in SCOPE and w in self.content}
        self.terms = set(self.words)  # what the antonym and exclusive-group checks compare
        if zh:
            self.numbers |= zh.numbers
            self.ordinals |= zh.ordinals
            self.negations += zh.negations
            self.terms |= zh.terms

    @staticmethod
    def _ordinal(word: str) -> bool:
        return bool(re.fullmatch(r"\d+(st|nd|rd|th)", word))

    @staticmethod
    def _number(word: str) -> str:
        return word.replace(",", "").rstrip(".").lstrip("0") or "0"


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> _Parsed:
    """A text parsed once for `verify` and `differences` of the same pair (read-only after construction)."""
    return _Parsed(text)


def _swapped(a: _Parsed, b: _Parsed) -> bool:
    """Two shared content words in opposite order around the same relation word ("Poles dislike Russians")."""
    common = set(a.content) & set(b.content)
    pos_a = {w: i for i, w in enumerate(a.words) if w in common}
    pos_b = {w: i for i, w in enumerate(b.words) if w in common}
    words = sorted(common)
    for i, x in enumerate(words):
        for y in words[i + 1 :]:
            if (pos_a[x] < pos_a[y]) == (pos_b[x] < pos_b[y]):
                continue
            span_a = a.words[min(pos_a[x], pos_a[y]) + 1 : max(pos_a[x], pos_a[y])]
            span_b = b.words[min(pos_b[x], pos_b[y]) + 1 : max(pos_b[x], pos_b[y])]
            if max(len(span_a), len(span_b)) <= MAX_ROLE_SPAN and (set(span_a) & set(span_b)) - SYMMETRIC:
                return True
    return False


def _zh_swapped(a: str, b: str) -> bool:
    """The two sides of a Chinese relation word swapped: `a` holds X到Y and `b` holds Y到X but not X到Y
    (directional words in streams/text/lang/zh.yaml; each side 1 to MAX_ZH_ROLE Han characters)."""
    for word in DIRECTIONAL:
        start = a.find(word)
        while start >= 0:
            after = start + len(word)
            for lx in range(1, min(MAX_ZH_ROLE, start) + 1):
                x = a[start - lx : start]
                for ly in range(1, MAX_ZH_ROLE + 1):
                    y = a[after : after + ly]
                    if len(y) < ly or not _HAN_ONLY.fullmatch(x + y):
                        break
                    if x != y and f"{y}{word}{x}" in b and f"{x}{word}{y}" not in b:
                        return True
            start = a.find(word, start + 1)
    return False


def _opposite(a: _Parsed, b: _Parsed) -> bool:
    """An antonym on each side ("gain" vs "lose"), or two different members of an exclusive group (colours)."""
    sa, sb = a.terms, b.terms
    if any(
        (x in sa and y in sb and y not in sa and x not in sb) or (y in sa and x in sb and x not in sa and y not in sb)
        for x, y in ANTONYMS
    ):
        return True
    return any(sa & group and sb & group and sa & group != sb & group for group in EXCLUSIVE)


def verify(query: str, cached: str) -> Verdict:
    """Verdict(ok=True) when nothing but wording separates the two questions."""
    a, b = _parsed(query), _parsed(cached)
    if a.numbers != b.numbers:
        return Verdict(False, "number")
    if bool(a.negations) != bool(b.negations):  # negated on one side only: in both is no difference
        return Verdict(False, "negation")
    if a.ordinals != b.ordinals:
        return Verdict(False, "ordinal")
    if _opposite(a, b):
        return Verdict(False, "antonym")
    if keyterms.differ(query, cached):
        return Verdict(False, "key_term")
    if _HAN.search(query) and _zh_swapped(*(unicodedata.normalize("NFKC", t) for t in (query, cached))):
        return Verdict(False, "swapped_roles")
    if not (a.latin and b.latin):
        return Verdict(True)
    if _swapped(a, b):
        return Verdict(False, "swapped_roles")
    extra_a, extra_b = set(a.content) - set(b.content), set(b.content) - set(a.content)
    key_a, key_b = extra_a & a.key, extra_b & b.key
    if (key_a and not extra_b) or (key_b and not extra_a):
        return Verdict(False, "narrower_scope")
    if extra_a & a.names or extra_b & b.names:
        return Verdict(False, "key_term")
    if (not extra_b and extra_a & a.scoped) or (not extra_a and extra_b & b.scoped):
        return Verdict(False, "narrower_scope")
    return Verdict(True)


def asks(text: str) -> frozenset[str]:
    """What a question asks by its question words (why, how, quantity, ...; none for a yes/no question), in
    English and Chinese: "Why did X win?" and "Did X win?" differ, as do 如何 and 为什么."""
    units = language.units(text)
    kinds = {_ZH_ASKS[m] for m in _ZH_ASK.findall(text)} if _HAN.search(text) else set()
    skip = False
    for unit, after in zip(units, units[1:] + [""]):
        if skip:
            skip = False
        elif f"{unit} {after}" in _EN_ASKS:
            kinds.add(_EN_ASKS[f"{unit} {after}"])
            skip = True
        elif unit in _EN_ASKS:
            kinds.add(_EN_ASKS[unit])
    return frozenset(kinds)


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def differences(query: str, cached: str) -> dict[str, float]:
    """What separates two questions that passed `verify`, as numbers for the learned verifier (verifier.py):
    the overlap of their content word units (language.units: words, CJK character bigrams), the content units
    (stemmed Latin-script words, CJK bigrams) and the Latin-script key terms only one side has, the ratio of their
    lengths in units, the overlap of their consecutive content unit pairs (word order: "ethane to ethene" vs
    "ethene to ethane"), the overlap of all their units (function words too: "this plant" vs "plant"), and whether
    their question words ask different things (asks)."""
    a, b = _parsed(query), _parsed(cached)
    seq_a, seq_b = (language.units(t, content=True) for t in (query, cached))
    units_a, units_b = set(seq_a), set(seq_b)
    union = units_a | units_b
    # Latin-script content words stemmed (verify's), CJK content units (bigrams) as language.units cuts them.
    words_a, words_b = (
        {w for w in p.content if w.isascii()} | {u for u in seq if not u.isascii()}
        for p, seq in ((a, seq_a), (b, seq_b))
    )
    extra_a, extra_b = words_a - words_b, words_b - words_a
    sizes = sorted((len(units_a), len(units_b)))
    return {
        "overlap": len(units_a & units_b) / len(union) if union else 1.0,
        "extra_words": float(len(extra_a) + len(extra_b)),
        "extra_key": float(len(extra_a & a.key) + len(extra_b & b.key)),
        "length_ratio": sizes[0] / sizes[1] if sizes[1] else 1.0,
        "order": _jaccard(set(zip(seq_a, seq_a[1:])), set(zip(seq_b, seq_b[1:]))),
        "all_overlap": _jaccard(set(language.units(query)), set(language.units(cached))),
        "asks": float(asks(query) != asks(cached)),
    }
