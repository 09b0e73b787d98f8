"""Language-aware text handling, in one place: which language a text is in, its word units, and the word lists of
each language (stop words, negations, number words, fillers) from streams/text/lang/.

Space-delimited scripts split into lowercased words; CJK runs have no spaces, so their units are overlapping
character bigrams ("预订酒店": 预订 订酒 酒店), which need no segmenter (docs/architecture.md compares them with
jieba). Search also takes each CJK character (`unigrams=True`): a question and its answer often share a character
but no bigram (脑子 / 脑力).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DATA = Path(__file__).with_name("lang")
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK = re.compile(f"[{_CJK_CHARS}]")
_UNIT = re.compile(f"([{_CJK_CHARS}]+)|([^\\W_{_CJK_CHARS}]+(?:'[^\\W\\d_]+)?)", re.UNICODE)
_SCRIPTS = (  # (language, characters of its script); Han alone is Chinese, Han with kana is Japanese
    ("ja", re.compile("[\u3040-\u30ff]")),
    ("ko", re.compile("[\uac00-\ud7af]")),
    ("zh", re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")),
    ("ru", re.compile("[\u0400-\u04ff]")),
    ("ar", re.compile("[\u0600-\u06ff]")),
    ("en", re.compile("[A-Za-z\u00c0-\u024f]")),
)
LATIN_LETTERS_PER_UNIT = 4  # a CJK character carries about as much as four Latin letters (a short word)
UNDETERMINED = "und"


def normalize(text: str) -> str:
    """NFKC (full-width digits and letters become ASCII) and lowercase: the form units are taken from."""
    return unicodedata.normalize("NFKC", text).lower()


def detect(text: str) -> str:
    """The language of `text` by its script: 'zh', 'ja', 'ko', 'ru', 'ar', 'en' (any Latin script), or 'und'
    where it has no letters. Mixed text goes to the script carrying most of it, a CJK character weighing as
    much as LATIN_LETTERS_PER_UNIT Latin letters ("帮我查一下iPhone 15的价格" is Chinese); kana among Han
    makes Japanese."""
    counts: dict[str, float] = {lang: len(pattern.findall(text)) for lang, pattern in _SCRIPTS}
    if counts["ja"] and counts["ja"] + counts["zh"] >= counts["ko"]:
        counts["ja"] += counts.pop("zh")
    counts["en"] /= LATIN_LETTERS_PER_UNIT
    best = max(counts, key=lambda lang: counts[lang])
    return best if counts[best] else UNDETERMINED


def is_cjk(lang: str) -> bool:
    return lang in ("zh", "ja", "ko")


def has_cjk(text: str) -> bool:
    """Whether `text` holds a CJK character: without one, detect() cannot answer a CJK language (a quick test
    before it)."""
    return _CJK.search(text) is not None


def units(text: str, *, content: bool = False, unigrams: bool = False) -> list[str]:
    """The word units of `text` in order: lowercased words (digits included) of space-delimited scripts,
    character bigrams of CJK runs (a one-character run is its own unit). `unigrams=True` adds each character of
    a longer CJK run after its bigrams (search units; text without CJK is unchanged). `content=True` leaves out
    stop words (English words; Chinese units that are a stop word or two stop characters, such as 的 or 我的)."""
    out: list[str] = []
    for cjk, word in _UNIT.findall(normalize(text)):
        if word:
            out.append(word)
        elif len(cjk) == 1:
            out.append(cjk)
        else:
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
            if unigrams:
                out.extend(cjk)
    if content:
        stop = _stop_units()
        out = [u for u in out if u not in stop and not (len(u) == 2 and u[0] in stop and u[1] in stop)]
    return out


@functools.cache
def _stop_units() -> frozenset[str]:
    return lexicon("en").stopwords | lexicon("zh").stopwords


@dataclass(frozen=True)
class Lexicon:
    """The word lists of one language. `numbers`: number word → value (zh: numerals and 十百千万亿 units);
    `data`: every list of the language's file, for checks with lists of their own (antonyms, classifiers)."""

    lang: str
    stopwords: frozenset[str] = frozenset()
    negations: tuple[str, ...] = ()
    numbers: dict[str, int] = field(default_factory=dict)
    fillers: frozenset[str] = frozenset()
    data: dict = field(default_factory=dict)


def _words(value) -> list[str]:
    return value.split() if isinstance(value, str) else [str(v) for v in value or ()]


@functools.cache
def lexicon(lang: str) -> Lexicon:
    """The word lists of `lang` from streams/text/lang/<lang>.yaml; a language without a file has empty lists."""
    path = DATA / f"{lang}.yaml"
    if not path.is_file():
        return Lexicon(lang)
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    numbers = {w: i for i, w in enumerate(_words(data.get("number_words")))}
    for key in ("tens", "big_numbers", "numerals", "units"):
        numbers |= {str(w): int(v) for w, v in (data.get(key) or {}).items()}
    return Lexicon(
        lang,
        frozenset(_words(data.get("stopwords"))),
        tuple(_words(data.get("negations"))),
        numbers,
        frozenset(_words(data.get("fillers"))),
        data,
    )


@functools.cache
def _to_simplified() -> tuple[re.Pattern, dict[int, str]]:
    """(a pattern finding any listed traditional character, the translation table): most Chinese text has none,
    and a search costs less than translating."""
    pairs = _words(lexicon("zh").data.get("traditional"))
    bad = [pair for pair in pairs if len(pair) != 2]
    if bad:
        raise ValueError(f"{DATA / 'zh.yaml'}: traditional holds {bad[:3]}; write each pair as two characters")
    table = {ord(pair[0]): pair[1] for pair in pairs}
    return re.compile("[" + re.escape("".join(map(chr, table))) + "]" if table else "(?!)"), table


def simplified(text: str) -> str:
    """`text` with the traditional characters of zh.yaml's `traditional` list in their simplified form, one
    character for one, so positions in the result are positions in `text`: a pattern written once in simplified
    characters then matches both scripts (這些資訊對你有所幫助 reads as 这些资讯对你有所帮助)."""
    if not has_cjk(text):
        return text
    traditional, table = _to_simplified()
    return text.translate(table) if traditional.search(text) else text


def stem(word: str) -> str:
    """A light Porter-like English stem (plural, -ing, -ed, -ly, superlative, final e): enough to compare two
    questions or two field names. Stop words, negations and non-words are returned lowercased as they are."""
    en = lexicon("en")
    word = word.lower().removesuffix("'s").replace("'", "")
    if word in en.stopwords or word in en.negations or not word.isalpha():
        return word
    if len(word) > 4 and word.endswith(("ies", "iest", "ied")):
        return word[: word.rindex("i")] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix, min_len in (("ing", 6), ("ed", 5), ("ly", 6), ("est", 7), ("er", 6)):
        if len(word) >= min_len and word.endswith(suffix):
            word = word[: -len(suffix)]
            if len(word) > 2 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]
            break
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


def zh_value(run: str) -> str:
    """The number a run of digits or Chinese numerals writes: 十五 → 15, 二零一五 → 2015, 三万五千 → 35000."""
    if run.isascii():
        return str(int(run))
    zh = lexicon("zh").data
    digits, units_ = zh["numerals"], zh["units"]
    if not any(c in units_ for c in run):
        return str(int("".join(str(digits[c]) for c in run)))
    high = myriads = section = digit = 0  # 亿 and above, 万 up to 亿, below 万, the pending digit
    for c in run:
        unit = units_.get(c)
        if unit is None:
            digit = digits[c]
        elif unit >= 10**8:
            high, myriads, section, digit = (high + myriads + section + digit) * unit, 0, 0, 0
        elif unit >= 10**4:
            myriads, section, digit = (myriads + section + digit) * unit, 0, 0
        else:
            section, digit = section + (digit or 1) * unit, 0
    return str(high + myriads + section + digit)


def _alternation(words) -> re.Pattern:
    """A regex matching any of `words`, longest first (没有 before 没)."""
    return re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))))


@functools.cache
def _number_patterns():
    zh = lexicon("zh").data
    numerals = "".join(zh["numerals"]) + "".join(zh["units"])
    return (
        re.compile(f"({re.escape(zh['percent'])})?([{numerals}]+)"),
        _alternation(_words(zh["classifiers"])),
        _alternation(_words(zh["not_numbers"])),
    )


_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")


def numbers(text: str) -> list[str]:
    """The values of the numbers `text` writes, a number written twice counted twice: digits (1,200 → 1200),
    then English number words, then Chinese numerals (chinese_numbers)."""
    text = unicodedata.normalize("NFKC", text)
    out = [m.group().replace(",", "").rstrip(".").lstrip("0") or "0" for m in _DIGITS.finditer(text)]
    en = lexicon("en").numbers
    return out + [str(en[w]) for w in re.findall(r"[a-z]+", text.lower()) if w in en] + chinese_numbers(text)


def chinese_numbers(text: str) -> list[str]:
    """The values Chinese numerals in `text` write (三万五千 → 35000), in order; a lone numeral counts only
    before a classifier (三个, 两晚), and 一 + classifier is the article "a", not 1."""
    if not _SCRIPTS[2][1].search(text):
        return []
    run_re, classifier, not_number = _number_patterns()
    masked = not_number.sub(lambda m: " " * len(m.group()), text)
    out = []
    for m in run_re.finditer(masked):
        percent, run = m.groups()
        if percent or len(run) > 1 or (classifier.match(masked, m.end()) is not None and run != "一"):
            out.append(zh_value(run))
    return out
