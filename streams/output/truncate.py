"""Token-exact truncation with the request's encoding: never above max_tokens, cut at a sentence end."""

from __future__ import annotations

import functools
import re

from streams.text import tokens

SENTENCE_END = re.compile(r"[.!?](?=\s)|[。！？；]|\n")
WHITESPACE = re.compile(r"\s")
FENCE_LINE = re.compile(r"^\s{0,3}(```|~~~)", re.MULTILINE)
# A sentence end is used only if it keeps at least this share of what fits; else cut at a word, then anywhere.
MIN_KEEP = 0.5


def _cut_point(head: str) -> int:
    floor = int(len(head) * MIN_KEEP)
    for pattern in (SENTENCE_END, WHITESPACE):
        last = None
        for match in pattern.finditer(head, floor):
            last = match
        if last is not None:
            return last.end() if pattern is SENTENCE_END else last.start()
    return len(head)


def _inside_fence(text: str) -> str:
    """The fence string left open at the end of `text`, or ''."""
    open_fence = ""
    for m in FENCE_LINE.finditer(text):
        open_fence = "" if open_fence else m.group(1)
    return open_fence


def _mark(kept: str, marker: str) -> str:
    """`kept` + the cut marker, with a code fence left open closed first (an empty one dropped)."""
    fence = _inside_fence(kept)
    last_line = kept.rpartition("\n")[2]
    if fence and FENCE_LINE.match(last_line):  # only the opening line of a block fits: drop it
        return _mark(kept.rpartition("\n")[0].rstrip(), marker)
    if fence:
        return f"{kept}\n{fence}\n{marker}"
    if FENCE_LINE.match(last_line):  # a closing fence line must stay alone on its line
        return f"{kept}\n{marker}"
    return f"{kept} {marker}" if kept else marker


def _decode(enc, ids: list[int]) -> str:
    if hasattr(enc, "decode_bytes"):  # tiktoken: drop a multi-byte character split by the cut
        return enc.decode_bytes(ids).decode("utf-8", "ignore")
    return enc.decode(ids)


@functools.lru_cache(maxsize=64)
def _marker_tokens(enc, marker: str) -> int:
    return len(enc.encode_ordinary(" " + marker))


def truncate(text: str, max_tokens: int, model: str, marker: str = "[…]") -> tuple[str, bool]:
    """(text cut to at most `max_tokens` tokens of `model`'s encoding, whether it was cut).

    The cut lands after the last sentence end (or line end) in the part that fits, closes a code fence
    left open, and appends `marker` so readers see the answer was cut. With no room for the marker the
    text is cut hard, without one.
    """
    enc = tokens.for_model(model)
    out, was_cut, _ = cut(text, enc.encode_ordinary(text), max_tokens, enc, marker)
    return out, was_cut


def cut(text: str, ids: list[int], max_tokens: int, enc, marker: str = "[…]") -> tuple[str, bool, int]:
    """`truncate` of a text whose tokens `ids` are known: (text, whether it was cut, its tokens)."""
    if len(ids) <= max_tokens:
        return text, False, len(ids)
    if max_tokens <= 0:
        return "", True, 0
    budget = max_tokens - _marker_tokens(enc, marker)
    while budget > 0:
        head = _decode(enc, ids[:budget])
        out = _mark(head[: _cut_point(head)].rstrip(), marker)
        size = len(enc.encode_ordinary(out))
        if size <= max_tokens:
            return out, True, size
        budget -= size - max_tokens
    out = _decode(enc, ids[:max_tokens])
    return out, True, len(enc.encode_ordinary(out))
