"""Reworded decision traffic from the shared development data, for `jev cache replay --decisions`.

Each item is two decision requests over the same candidates: a question, then later another question that
rewords it or nearly does (same words, another meaning). Candidates are five FAQ questions from the same
source: the two that share most words with the first question (plausible confusers, so some decisions are
close calls) and three drawn at random. About half the requests of a file reword an earlier one.

English items are Quora pairs (qqp-dev: label 1 a rewording, label 0 a near one, two of the first to one of
the second; the label kept as an ignored field). Chinese items are questions from zh-dev (the forum questions
of answers.jsonl and the first user turns of dialogs.jsonl) reworded by rules: an opener, a closer and
colloquial synonyms (什么 -> 啥, 如何 -> 怎么, …); a third of them are near rewordings whose meaning moves (a
negation flipped, a number changed).

Every item falls in the tuning or the held-out slice by a hash of its first question (HELD_OUT_SHARE held
out), fixed before any tuning; the seed orders and samples within a slice only, so no seed moves an item
across slices.
"""

from __future__ import annotations

import hashlib
import random
import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import orjson

HELD_OUT_SHARE = 0.3
CANDIDATES = 5
CONFUSERS = 2
MAX_GAP = 60  # the rewording comes 1..MAX_GAP requests after its first question
SLICES = ("tune", "heldout")

ZH_OPENERS = ["", "请问", "请问一下，", "我想问问，", "有个问题：", "想知道", "求解答："]
ZH_CLOSERS = ["", "？", "呢？", "，谢谢", "，求解答", "，在线等"]
ZH_SYNONYMS = [
    ("为什么", "为啥"),
    ("什么", "啥"),
    ("如何", "怎么"),
    ("怎么办", "咋办"),
    ("是不是", "是否"),
    ("可以", "能"),
    ("非常", "特别"),
    ("现在", "目前"),
]
ZH_NEGATIONS = [
    ("不能", "能"),
    ("不会", "会"),
    ("不是", "是"),
    ("没有", "有"),
    ("能", "不能"),
    ("会", "不会"),
    ("是", "不是"),
    ("有", "没有"),
    ("要", "不要"),
    ("想", "不想"),
]
ZH_NUMBERS = "一二三四五六七八九十"


def slice_of(first: str) -> str:
    """tune or heldout, by a hash of the item's first question only."""
    digest = hashlib.blake2b(first.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "little") / 2**64 < HELD_OUT_SHARE else "tune"


def units(text: str) -> set[str]:
    """Word units for picking confusers: lower-cased words, and Han character bigrams."""
    words = set(re.findall(r"[a-z0-9']+", text.lower()))
    han = re.sub(r"[^\u4e00-\u9fff]", "", text)
    return words | {han[i : i + 2] for i in range(len(han) - 1)}


def confusers(questions: list[str], n: int) -> list[list[int]]:
    """For each question, the n others sharing the most rare units with it (inverse-frequency weighted)."""
    sets = [units(q) for q in questions]
    df = Counter(u for s in sets for u in s)
    postings: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        for u in s:
            if df[u] <= 200:
                postings[u].append(i)
    out = []
    for i, s in enumerate(sets):
        score: dict[int, float] = defaultdict(float)
        for u in s:
            for j in postings.get(u, ()):
                if j != i:
                    score[j] += 1.0 / df[u]
        out.append(sorted(score, key=lambda j: (-round(score[j], 9), j))[:n])
    return out


def zh_reword(question: str, rng: random.Random, near: bool) -> str:
    """The question in other words (opener, synonyms, closer); `near`: its meaning moved too."""
    text = question.rstrip("？?。！!")
    for a, b in ZH_SYNONYMS:
        if a in text and rng.random() < 0.6:
            text = text.replace(a, b, 1)
    if near:
        text = zh_shift(text, rng)
    return rng.choice(ZH_OPENERS) + text + rng.choice(ZH_CLOSERS)


def zh_shift(text: str, rng: random.Random) -> str:
    """Move the meaning: flip a negation, else change a number, else drop the last clause, else ask the opposite."""
    for a, b in ZH_NEGATIONS:
        if a in text:
            return text.replace(a, b, 1)
    digits = [i for i, c in enumerate(text) if c.isdigit() or c in ZH_NUMBERS]
    if digits:
        i = rng.choice(digits)
        pool = "0123456789" if text[i].isdigit() else ZH_NUMBERS
        return text[:i] + rng.choice([c for c in pool if c != text[i]]) + text[i + 1 :]
    parts = re.split(r"[，,]", text)
    return "，".join(parts[:-1]) if len(parts) > 1 else text + "的反面"


def english_items(shared: Path) -> list[tuple[str, str, int]]:
    """(first, rewording, label) from qqp-dev's pairs."""
    rows = [orjson.loads(line) for line in (shared / "qqp-dev" / "pairs.jsonl").read_bytes().splitlines() if line]
    return [(r["text_a"], r["text_b"], int(r["label"])) for r in rows if r["text_a"].strip() and r["text_b"].strip()]


def chinese_questions(shared: Path) -> list[str]:
    """zh-dev's forum questions and the first user turn of each dialog, each once."""
    zh = shared / "zh-dev"
    questions = [orjson.loads(line)["question"] for line in (zh / "answers.jsonl").read_bytes().splitlines() if line]
    for line in (zh / "dialogs.jsonl").read_bytes().splitlines():
        if line:
            turns = [m["content"] for m in orjson.loads(line)["messages"] if m["role"] == "user"]
            questions.extend(turns[:1])
    return list(dict.fromkeys(q.strip() for q in questions if 4 <= len(q.strip()) <= 120))


def chinese_items(shared: Path) -> list[tuple[str, str, int]]:
    """(first, rewording, 1 for a rewording or 0 for a near one) from zh-dev's questions (fixed draws per item)."""
    items = []
    for q in chinese_questions(shared):
        rng = random.Random(f"zh:{q}")
        near = rng.random() < 1 / 3
        items.append((q, zh_reword(q, rng, near), 0 if near else 1))
    return items


def build(shared: str | Path, lang: str, part: str, n_items: int = 0, seed: int = 0) -> list[dict]:
    """Request records in arrival order: `n_items` items (0: all) of slice `part` in `lang` (en or zh)."""
    if lang not in ("en", "zh"):
        raise ValueError(f"language must be en or zh, got {lang!r}")
    if part not in SLICES:
        raise ValueError(f"slice must be one of {', '.join(SLICES)}, got {part!r}")
    shared = Path(shared)
    if not shared.is_dir():
        raise FileNotFoundError(f"no shared data at {shared}: set JEV_SHARED_DATA to the folder holding qqp-dev")
    items = english_items(shared) if lang == "en" else chinese_items(shared)
    pool = list(dict.fromkeys(a for a, _, _ in items))  # every first question is a possible FAQ entry
    rng = random.Random(f"{lang}:{part}:{seed}")
    chosen = [it for it in dict((a, (a, b, y)) for a, b, y in items).values() if slice_of(it[0]) == part]
    rewords = [it for it in chosen if it[2] == 1]
    near_ones = [it for it in chosen if it[2] == 0]
    rng.shuffle(near_ones)
    chosen = rewords + near_ones[: len(rewords) // 2]  # two rewordings to one near one, as in Chinese
    rng.shuffle(chosen)
    chosen = chosen[:n_items] if n_items else chosen
    position = {q: i for i, q in enumerate(pool)}
    near = confusers(pool, CONFUSERS + 2)
    slots: list[tuple[float, dict]] = []
    for k, (first, second, label) in enumerate(chosen):
        exclude = {first, second}
        picked = [pool[j] for j in near[position[first]] if pool[j] not in exclude][:CONFUSERS]
        while len(picked) < CANDIDATES:
            other = rng.choice(pool)
            if other not in exclude and other not in picked:
                picked.append(other)
        rng.shuffle(picked)
        candidates = [{"id": f"faq-{zlib.crc32(t.encode()):08x}", "text": t} for t in picked]
        start = 2 * k + rng.random()
        for i, (state, at) in enumerate(((first, start), (second, start + 2 + rng.uniform(0, MAX_GAP)))):
            slots.append((at, request(lang, f"{lang}-{part}-{seed}-{k}-{i}", state, candidates, label, i)))
    return [r for _, r in sorted(slots, key=lambda s: s[0])]


def request(lang: str, request_id: str, state: str, candidates: list[dict], label: int, second: int) -> dict:
    """One FAQ-routing decision request; `pair_label` and `rewords` are extra fields a replay ignores."""
    return {
        "request_id": request_id,
        "tenant": "acme",
        "service": "faq",
        "business_line": "support",
        "decision_type": "customer_service",
        "kind": "decide",
        "state": state,
        "candidates": candidates,
        "pair_label": label,
        "rewords": bool(second),
        "language": lang,
    }


def write(records: Iterable[dict], out: str | Path) -> int:
    lines = [orjson.dumps(r) for r in records]
    Path(out).write_bytes(b"\n".join(lines) + b"\n")
    return len(lines)
