"""Sensitive-word scan: one Aho-Corasick automaton over all dictionaries, linear in the text."""

from __future__ import annotations

import ahocorasick


def _is_word_char(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


class SensitiveScanner:
    """Case-insensitive; an entry that starts/ends with an ASCII word character matches only at a word
    boundary on that side (so "ass" never hits "class"), other entries (CJK, symbols) match anywhere."""

    def __init__(self, words: list[str]):
        self.words = sorted({w.strip() for w in words if w.strip()})
        self._automaton = ahocorasick.Automaton()
        for word in self.words:
            self._automaton.add_word(word.lower(), word)
        if self.words:
            self._automaton.make_automaton()

    def scan(self, text: str) -> list[str]:
        """The dictionary entries found in `text`, each once, in order of first appearance."""
        if not self.words or not text:
            return []
        lowered = text.lower()
        hits: dict[str, None] = {}
        for end, word in self._automaton.iter(lowered):
            start = end - len(word) + 1
            if _is_word_char(word[0]) and start > 0 and _is_word_char(lowered[start - 1]):
                continue
            if _is_word_char(word[-1]) and end + 1 < len(lowered) and _is_word_char(lowered[end + 1]):
                continue
            hits.setdefault(word, None)
        return list(hits)
