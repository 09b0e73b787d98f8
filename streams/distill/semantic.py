"""Semantic layer: group turns into exchanges, keep the most recent answered questions and information,
fold the rest (venting, small talk, boilerplate, older exchanges) into short placeholders."""

from __future__ import annotations

from collections import Counter

PHRASES = {
    "resolved": "earlier question answered",
    "information": "earlier information supplied",
    "venting": "user expressed frustration",
    "chit-chat": "small talk",
    "boilerplate": "boilerplate",
}


def exchanges(roles: list[str]) -> list[list[int]]:
    """Each user turn opens an exchange that its replies join; system turns and replies before any
    user turn stand alone."""
    out: list[list[int]] = []
    open_exchange = False
    for i, role in enumerate(roles):
        if role == "user":
            out.append([i])
            open_exchange = True
        elif role != "system" and open_exchange:
            out[-1].append(i)
        else:
            out.append([i])
            open_exchange = False
    return out


def exchange_tag(unit: list[int], roles: list[str], tags: list[str]) -> str:
    head = unit[0]
    if roles[head] != "user":
        return tags[head]
    if tags[head] == "resolved" and len(unit) == 1:
        return "other"  # asked, not answered yet
    return tags[head]


def fold(
    units: list[list[int]],
    unit_tags: list[str],
    tags: list[str],
    protected: set[int],
    skip: set[int],
    keep_resolved: int,
    keep_informational: int,
) -> dict[int, str]:
    """{index: tag} of the turns folded away. Exchanges holding a protected turn are kept (and count
    towards the quotas); within kept exchanges, boilerplate replies are folded alone."""
    folded: dict[int, str] = {}
    quota = {"resolved": keep_resolved, "information": keep_informational}
    for unit, tag in zip(reversed(units), reversed(unit_tags)):
        live = [i for i in unit if i not in skip]
        if not live:
            continue
        is_protected = any(i in protected for i in unit)
        if tag in quota:
            quota[tag] -= 1
            drop = quota[tag] < 0 and not is_protected
        else:
            drop = tag in PHRASES and not is_protected
        if drop:
            folded.update((i, tag) for i in live)
            continue
        folded.update((i, "boilerplate") for i in live if tags[i] == "boilerplate" and i not in protected)
    return folded


def placeholder(run: list[tuple[str, str, bool]]) -> str:
    """One line for consecutive folded turns [(marker id, tag, opens an exchange), …]:
    '[S-003..S-006 folded: earlier question answered x2 — recorded]' (exchanges are counted)."""
    ids = run[0][0] if len(run) == 1 else f"{run[0][0]}..{run[-1][0]}"
    kinds = Counter(PHRASES[tag] for _, tag, opens in run if opens) or Counter(PHRASES[tag] for _, tag, _ in run)
    text = ", ".join(phrase if n == 1 else f"{phrase} x{n}" for phrase, n in kinds.items())
    return f"[{ids} folded: {text} — recorded]"
