"""Token counting throughput through the ingest path vs raw tiktoken on the same text, in one run.

Requests are built from Arena-Hard (state = a question, history = the question and GPT-4's answer,
candidates = the paragraphs of GPT-3.5's answer); `count_sections` counts them per section and the
baseline runs tiktoken's `encode` (and `encode_ordinary`) over exactly the same strings.
Last stdout line: one JSON object (ratio_to_raw = ingest throughput ÷ raw encode throughput, median of
rounds; target >= 0.9).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from schemas.records import Candidate, Request, Turn
from streams import settings as settings_mod
from streams.text import tokens
from streams.text.prompt import count_sections, history_lines, state_text


def load(arena: Path, limit: int) -> list[Request]:
    def rows(name):
        return {r["question_id"]: r for r in map(json.loads, (arena / name).open())}

    questions, gpt4, gpt35 = (
        rows(n) for n in ("questions.jsonl", "answers-gpt-4-0314.jsonl", "answers-gpt-3.5-turbo-0125.jsonl")
    )
    requests = []
    for qid, q in list(questions.items())[:limit]:
        question = q["turns"][0]["content"]
        paragraphs = [p for p in gpt35[qid]["choices"][0]["turns"][0]["content"].split("\n\n") if p.strip()][:20]
        requests.append(
            Request(
                request_id=qid,
                tenant="bench",
                service="arena",
                decision_type=q["cluster"][:40],
                state={"question": question, "cluster": q["cluster"]},
                history=[
                    Turn(role="user", content=question),
                    Turn(role="assistant", content=gpt4[qid]["choices"][0]["turns"][0]["content"]),
                ],
                candidates=[Candidate(id=f"p{i}", text=p) for i, p in enumerate(paragraphs)],
            )
        )
    return requests


def texts_of(request: Request) -> list[str]:
    return history_lines(request) + [state_text(request.state)] + [c.text for c in request.candidates]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=500, help="requests (Arena-Hard has 500)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; figures are the median round")
    ap.add_argument("--model", default="gpt-4o")
    args = ap.parse_args()
    arena = Path(settings_mod.load().shared_data) / "arena-hard"
    if not arena.exists():
        sys.exit(f"Arena-Hard not found at {arena}: set JEV_SHARED_DATA to the shared data directory")
    requests = load(arena, args.limit)
    texts = [t for r in requests for t in texts_of(r)]
    megabytes = sum(len(t.encode()) for t in texts) / 1e6
    enc = tokens.for_model(args.model)
    count_sections(requests[0], args.model)  # warm up

    # Interleave the three sides chunk by chunk so they see the same machine load (the CPUs are shared).
    # The raw sides get each chunk's strings ready-made: only the ingest side pays for building them.
    chunks = [
        (requests[i : i + 25], [t for r in requests[i : i + 25] for t in texts_of(r)])
        for i in range(0, len(requests), 25)
    ]
    sides = {
        "ingest": lambda chunk: sum(sum(count_sections(r, args.model).values()) for r in chunk[0]),
        "encode": lambda chunk: sum(len(enc.encode(t, disallowed_special=())) for t in chunk[1]),
        "encode_ordinary": lambda chunk: sum(len(enc.encode_ordinary(t)) for t in chunk[1]),
    }
    rounds = []
    for round_ in range(args.rounds):
        seconds, totals = dict.fromkeys(sides, 0.0), dict.fromkeys(sides, 0)
        names = list(sides)
        for i, chunk in enumerate(chunks):
            for name in names[i % 3 :] + names[: i % 3]:  # rotate who goes first: the later sides find warm caches
                fn = sides[name]
                start = time.perf_counter()
                totals[name] += fn(chunk)
                seconds[name] += time.perf_counter() - start
        rounds.append(seconds)
        print(
            f"round {round_ + 1}/{args.rounds}: "
            + ", ".join(f"{k} {megabytes / v:.1f} MB/s" for k, v in seconds.items()),
            file=sys.stderr,
        )
    mbps = {k: megabytes / statistics.median(r[k] for r in rounds) for k in sides}
    ratio = {k: statistics.median(r[k] / r["ingest"] for r in rounds) for k in ("encode", "encode_ordinary")}
    print(
        json.dumps(
            {
                "requests": len(requests),
                "texts": len(texts),
                "megabytes": round(megabytes, 3),
                "model": args.model,
                "tokens": totals["ingest"],
                "same_tokens": totals["ingest"] == totals["encode_ordinary"],
                "ingest_mb_per_s": round(mbps["ingest"], 2),
                "raw_encode_mb_per_s": round(mbps["encode"], 2),
                "raw_encode_ordinary_mb_per_s": round(mbps["encode_ordinary"], 2),
                "ingest_tokens_per_s": round(totals["ingest"] * mbps["ingest"] / megabytes),
                "ratio_to_raw": round(ratio["encode"], 3),
                "ratio_to_encode_ordinary": round(ratio["encode_ordinary"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
