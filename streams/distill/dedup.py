"""Dedup layer: a turn repeated verbatim (up to surrounding whitespace) is sent once (the latest copy),
and template paragraphs repeated across kept turns are sent once (in the latest turn carrying them)."""

from __future__ import annotations

MIN_PARAGRAPH = 80


def duplicate_turns(contents: list[str], protected: set[int]) -> dict[int, int]:
    """{index of an earlier copy: index of the latest copy}; protected turns are never dropped."""
    latest: dict[str, int] = {}
    dropped: dict[int, int] = {}
    for i in range(len(contents) - 1, -1, -1):
        key = contents[i].strip()
        if not key:
            continue
        if key in latest and i not in protected:
            dropped[i] = latest[key]
        else:
            latest.setdefault(key, i)
    return dropped


def strip_repeated_paragraphs(kept: list[int], contents: dict[int, str], protected: set[int], label) -> dict[int, str]:
    """{index: new content} for kept turns that repeat a paragraph a later kept turn also carries;
    the repeat becomes a pointer `[same text as S-…]` built by `label(index)`."""
    owner: dict[str, int] = {}
    changed: dict[int, str] = {}
    for i in sorted(kept, reverse=True):
        paragraphs = contents[i].split("\n\n")
        out, hit = [], False
        for paragraph in paragraphs:
            key = paragraph.strip()
            if len(key) < MIN_PARAGRAPH:
                out.append(paragraph)
            elif key in owner and i not in protected:
                out.append(f"[same text as {label(owner[key])}]")
                hit = True
            else:
                owner.setdefault(key, i)
                out.append(paragraph)
        if hit:
            changed[i] = "\n\n".join(out)
    return changed
