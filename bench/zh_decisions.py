"""Chinese decisions built from zh-dev (`jev score` input), with a dev split to tune on and a held-out one.

Two kinds, 20 candidates each with one right answer: next_turn (a dialog so far; the real reply among replies of
other dialogs of the same source) and answer (a forum question; the opening of its answer among others). A fifth is
held out by a hash of its text, distractors from the same split. Writes <out>/zh-{next_turn,answer}-{dev,heldout}.jsonl;
last stdout line: one JSON object.

    .venv/bin/python bench/zh_decisions.py --out /tmp/zh-decisions [--limit 400]
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from pathlib import Path

from streams import settings as settings_mod

CANDIDATES = 20
HELD_OUT = 5  # one in this many is held out
ANSWER_CHARS = 120  # the opening of an answer a candidate carries


def held_out(text: str) -> bool:
    return zlib.crc32(text.encode()) % HELD_OUT == 0


def decision(rid: str, state: str, right: str, others: list[str], rng: random.Random) -> dict:
    texts = [right, *rng.sample(others, CANDIDATES - 1)]
    order = list(range(CANDIDATES))
    rng.shuffle(order)
    candidates = [{"id": f"c{slot}", "text": texts[i]} for slot, i in enumerate(order)]
    return {
        "request_id": rid,
        "decision_type": "customer_service",
        "state": state,
        "candidates": candidates,
        "label": f"c{order.index(0)}",
    }


def next_turn(dialogs: list[dict], rng: random.Random) -> list[tuple[bool, dict]]:
    picked = []
    for d in dialogs:
        msgs = d["messages"]
        turns = [
            i
            for i in range(len(msgs) - 1)
            if msgs[i]["role"] == "user" and msgs[i + 1]["role"] == "assistant" and len(msgs[i + 1]["content"]) >= 6
        ]
        if turns:
            i = rng.choice(turns)
            state = "\n".join(
                ("用户：" if m["role"] == "user" else "助手：") + m["content"] for m in msgs[max(0, i - 2) : i + 1]
            )
            picked.append((held_out(d["source"]), d["source"], state, msgs[i + 1]["content"]))
    out = []
    for split, source, state, right in picked:
        family = source.split("/")[0]
        others = sorted({r for s, src, _, r in picked if s == split and src.split("/")[0] == family and r != right})
        out.append((split, decision(f"nt-{source}", state, right, others, rng)))
    return out


def answers(rows: list[dict], rng: random.Random) -> list[tuple[bool, dict]]:
    picked = [(held_out(r["question"]), r["question"], r["answer"][:ANSWER_CHARS]) for r in rows]
    out = []
    for n, (split, question, right) in enumerate(picked):
        others = sorted({a for s, _, a in picked if s == split and a != right})
        out.append((split, decision(f"qa-{n}", question, right, others, rng)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/zh-decisions"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--limit",
        type=int,
        default=0,
        help="use only the first N dialogs and N questions (0: all); a small machine scores fewer",
    )
    args = parser.parse_args()
    data = Path(settings_mod.load().shared_data) / "zh-dev"
    if not data.is_dir():
        raise SystemExit(f"{data}: no zh-dev data; set JEV_SHARED_DATA to the folder that holds zh-dev/")

    def read(name: str) -> list:
        lines = (data / name).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line][: args.limit or None]

    rng = random.Random(args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for kind, built in (
        ("next_turn", next_turn(read("dialogs.jsonl"), rng)),
        ("answer", answers(read("answers.jsonl"), rng)),
    ):
        for split, keep in (("dev", False), ("heldout", True)):
            rows = [d for h, d in built if h == keep]
            path = args.out / f"zh-{kind}-{split}.jsonl"
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
            counts[path.name] = len(rows)
    print(json.dumps({"out": str(args.out), "decisions": counts}))


if __name__ == "__main__":
    main()
