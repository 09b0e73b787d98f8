"""Is a cached question really the same question? Checks on top of the cosine, each naming why it refuses.

Near-duplicate questions that mean something else usually differ by one word: a number or year, a
negation, an antonym, an ordinal, swapped roles, a narrower scope, or a different key term (an entity or
rare word). Word-level checks run on Latin-script text; other scripts get the number check only.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from streams import tokens

_TOKEN = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d[\d,.]*(?:st|nd|rd|th)?|[^\W\d_]+", re.UNICODE)
_LATIN = re.compile(r"[A-Za-z]")

STOPWORDS = frozenset("""a an the is are was were be been being am do does did doing have has had having i me my
mine we our you your he him his she her it its they them their what which who whom whose why how when where
this that these those there here of to in on at by for with from into onto about as and or but if so than
then too very can could should would will shall may might must get got getting any some such just also
really way ways best good one s vs versus thing things someone something anyone anything else ever
possible like much many well make using use used""".split())
NEGATIONS = frozenset("not no never none nobody nothing neither nor without cannot cant dont doesnt didnt "
                      "isnt arent wasnt werent wont wouldnt shouldnt couldnt hasnt havent unable".split())
NUMBER_WORDS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {"hundred": "100", "thousand": "1000",
                                                     "million": "1000000", "billion": "1000000000"}
ORDINALS = {w: str(i) for i, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth".split())} | {"last": "last"}
_ANTONYM_PAIRS = [tuple(p.split("/")) for p in """gain/lose gain/loss increase/decrease increase/reduce
positive/negative buy/sell best/worst advantage/disadvantage pro/con before/after up/down more/less more/fewer
maximum/minimum max/min male/female man/woman men/women boy/girl start/stop begin/end open/close win/lose rich/poor
good/bad old/new old/young cheap/expensive fast/slow high/low easy/hard easy/difficult hot/cold love/hate like/dislike
true/false success/failure accept/reject import/export input/output upload/download enable/disable
add/remove include/exclude legal/illegal safe/dangerous healthy/unhealthy strong/weak big/small large/small
long/short early/late right/left north/south east/west inside/outside internal/external private/public
top/bottom first/last past/future day/night white/black light/dark heavy/light happy/sad
benefit/risk agree/disagree pass/fail rise/fall above/below over/under with/without higher/lower raise/lower
morning/evening morning/afternoon morning/night enter/leave arrive/depart admit/release taken/released
start/close start/finish attack/defend allow/forbid allow/ban remember/forget push/pull send/receive
borrow/lend""".split()]
# Words of one kind that exclude each other: "the gate is blue" is not "the gate is yellow".
_EXCLUSIVE_GROUPS = [group.split() for group in (
    "red orange yellow green blue purple pink brown black white grey gray silver gold",
    "monday tuesday wednesday thursday friday saturday sunday",
    "january february april june july august september october november december",
    "spring summer autumn winter")]
SCOPE = frozenset("in for with at on from of under during within".split())  # "MBA" vs "MBA in IT"
MAX_ROLE_SPAN = 3  # words between two swapped roles; farther apart it is clause order, not roles
SYMMETRIC = frozenset({"and", "or", "vs", "versus", ","})
RARE_RANK = 20_000  # a word that is one cl100k token with a lower rank is common English


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""


def _stem(word: str) -> str:
    """A light Porter-like stem (plural, -ing, -ed, -ly, superlative, final e): enough to compare two questions."""
    word = word.lower().removesuffix("'s").replace("'", "")
    if word in STOPWORDS or word in NEGATIONS or not word.isalpha():
        return word
    if len(word) > 4 and word.endswith(("ies", "iest", "ied")):
        return word[:word.rindex("i")] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix, min_len in (("ing", 6), ("ed", 5), ("ly", 6), ("est", 7), ("er", 6)):
        if len(word) >= min_len and word.endswith(suffix):
            word = word[:-len(suffix)]
            if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


ANTONYMS = [(_stem(x), _stem(y)) for x, y in _ANTONYM_PAIRS]
EXCLUSIVE = [frozenset(map(_stem, group)) for group in _EXCLUSIVE_GROUPS]


@functools.lru_cache(maxsize=100_000)
def _rare(word: str) -> bool:
    ids = tokens.for_model("cl100k_base").encode_ordinary(" " + word.lower())
    return len(ids) > 1 or ids[0] > RARE_RANK


class _Parsed:
    def __init__(self, text: str):
        raw = _TOKEN.findall(text)
        self.latin = bool(_LATIN.search(text))
        # An acronym keeps its case: "IT" is a field, "it" a stop word.
        self.words = [t if t.isupper() and len(t) > 1 and t.isalpha() else _stem(t) for t in raw]
        self.numbers = {self._number(t) for t in self.words if t[0].isdigit() and not self._ordinal(t)}
        self.numbers |= {NUMBER_WORDS[w] for w in self.words if w in NUMBER_WORDS}
        self.ordinals = {ORDINALS.get(w) or re.sub(r"\D", "", w) for w in self.words
                         if w in ORDINALS or self._ordinal(w)}
        self.negations = sum(w in NEGATIONS or r.lower().endswith("n't") for w, r in zip(self.words, raw))
        self.content = [w for w in self.words if w not in STOPWORDS and w not in NEGATIONS
                        and w not in NUMBER_WORDS and w not in ORDINALS and not w[0].isdigit()]
        # Names (capitalized, acronyms) are key terms; a rare word is one only when it narrows the other side.
        self.names = {w for i, (w, t) in enumerate(zip(self.words, raw)) if w in self.content and (
            t.isupper() and len(t) > 1 or i > 0 and t[0].isupper())}
        self.key = self.names | {w for w in self.content if _rare(w)}
        self.scoped = {w for prev, w in zip(self.words, self.words[1:]) if prev in SCOPE and w in self.content}

    @staticmethod
    def _ordinal(word: str) -> bool:
        return bool(re.fullmatch(r"\d+(st|nd|rd|th)", word))

    @staticmethod
    def _number(word: str) -> str:
        return word.replace(",", "").rstrip(".").lstrip("0") or "0"


def _swapped(a: _Parsed, b: _Parsed) -> bool:
    """Two shared content words in opposite order around the same relation word ("Poles dislike Russians")."""
    common = set(a.content) & set(b.content)
    pos_a = {w: i for i, w in enumerate(a.words) if w in common}
    pos_b = {w: i for i, w in enumerate(b.words) if w in common}
    words = sorted(common)
    for i, x in enumerate(words):
        for y in words[i + 1:]:
            if (pos_a[x] < pos_a[y]) == (pos_b[x] < pos_b[y]):
                continue
            span_a = a.words[min(pos_a[x], pos_a[y]) + 1:max(pos_a[x], pos_a[y])]
            span_b = b.words[min(pos_b[x], pos_b[y]) + 1:max(pos_b[x], pos_b[y])]
            if max(len(span_a), len(span_b)) <= MAX_ROLE_SPAN and (set(span_a) & set(span_b)) - SYMMETRIC:
                return True
    return False


def _opposite(a: _Parsed, b: _Parsed) -> bool:
    """An antonym on each side ("gain" vs "lose"), or two different members of an exclusive group (colours)."""
    sa, sb = set(a.words), set(b.words)
    if any((x in sa and y in sb and y not in sa and x not in sb) or
           (y in sa and x in sb and x not in sa and y not in sb) for x, y in ANTONYMS):
        return True
    return any(sa & group and sb & group and sa & group != sb & group for group in EXCLUSIVE)


def verify(query: str, cached: str) -> Verdict:
    """Verdict(ok=True) when nothing but wording separates the two questions."""
    a, b = _Parsed(query), _Parsed(cached)
    if a.numbers != b.numbers:
        return Verdict(False, "number")
    if not (a.latin and b.latin):
        return Verdict(True)
    if a.negations != b.negations:
        return Verdict(False, "negation")
    if a.ordinals != b.ordinals:
        return Verdict(False, "ordinal")
    if _opposite(a, b):
        return Verdict(False, "antonym")
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
