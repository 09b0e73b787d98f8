"""What a user stated that a decision may depend on: numbers, dates and times, titles and named places.

The semantic layer never folds a short user turn whose constraints no later user turn restates ("住三晚",
"评分5分以上", "《无与伦比的美丽》", "霞云岭国家森林公园", "at 9:30 on Friday"): a conversation's last question often
leans on them without repeating them. (The budget and the time layer still may: a budget is a hard cap.) Numbers come
from streams.text.language (digits, number words, Chinese numerals); place suffixes from the language's word lists.
"""

from __future__ import annotations

import functools
import re

from streams.text import language
from streams.text.keyterms import IDENTIFIER, place

MAX_CHARS = 300  # a longer user turn is pasted material, not a stated constraint
RESTATED_CHARS = 4
TIME_OR_TITLE = re.compile(
    r"《[^》\n]{1,40}》|\b\d{1,2}[:：]\d{2}\b|\d{1,4}[年月日号]|[一二三四五六七八九十]{1,3}[月日号]"
)
LATIN_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")


def constraints(text: str) -> frozenset[str]:
    """The constraints `text` states, normalized (numbers as values; the digits of an identifier such as an order
    number are not a stated quantity: a later turn names the order again when it matters)."""
    return frozenset() if len(text) > MAX_CHARS else stated(text)


@functools.lru_cache(maxsize=16_384)  # of texts up to MAX_CHARS: a few MB at most
def stated(text: str) -> frozenset[str]:
    """constraints() of a turn short enough to state them, remembered per text: every request of a conversation
    sends its earlier turns again, and each is read here again."""
    found = {f"#{v}" for v in language.numbers(IDENTIFIER.sub(" ", text))}  # order ab-12, A320: a reference
    found |= {m.group() for m in TIME_OR_TITLE.finditer(text)}
    found |= {m.group() for m in place().finditer(text)}
    found |= {m.group() for m in LATIN_NAME.finditer(text.strip())}
    return frozenset(found)


def constraint_turns(messages: list[dict]) -> set[int]:
    """User turns holding a constraint that no later user turn states again (a name counts as restated when its
    last RESTATED_CHARS characters are: "订北京饭店" by "北京饭店住三晚")."""
    keep: set[int] = set()
    later: set[str] = set()
    later_text = ""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") != "user":
            continue
        text = messages[i].get("content") or ""
        own = constraints(text)
        if any(c not in later if c.startswith("#") else c[-RESTATED_CHARS:] not in later_text for c in own):
            keep.add(i)
        later |= own
        later_text += "\n" + text
    return keep
