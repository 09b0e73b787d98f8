"""Jev's OpenAI-compatible engine vs direct httpx calls to the same server: same prompts, same concurrency.

Decide: the demo workload's decisions scored through the engine's score_many (pool, retries, circuit) against the
same prompts sent to /completions directly, rounds alternating who goes first after a warm-up round. Generate:
--generate streamed chat completions each way. `ratio_to_direct` is Jev's throughput over direct's,
`calls_per_decision` Jev's HTTP calls per decision, `drift` Jev's token count against the server's. Without --url
it starts the local llama.cpp server (infra/model_server.py) with one slot per concurrent call and the threads the
machine has idle, and stops it after. A direct call whose connection drops is sent again (`direct_retries`); one
that still fails ends the run with `failed` in the last line, never a traceback.
Last stdout line: {config: {...}, decide: {...}, generate: {...}, ratio_to_direct, calls_per_decision, drift}.

    .venv/bin/python bench/model_server.py [--url http://127.0.0.1:PORT/v1] [--model smollm2-server]
        [--decisions 48] [--concurrency 4] [--rounds 4] [--generate 6]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
import time

import httpx
import orjson

from schemas.records import Request
from streams.models import http
from streams.models import openai as engine_mod
from streams.models import pool as pool_mod
from streams.models.protocol import ModelUnavailable
from streams.scoring.factory import work_for
from workers.harness import workload

RETRIES = 3  # a direct call is sent again this many times after a dropped connection
LIMITS = httpx.Limits(keepalive_expiry=http.KEEPALIVE_S)  # as Jev's engine: idle connections dropped before the server


class DirectFailed(Exception):
    """A direct reference call that failed RETRIES + 1 times."""


async def retried(call, retries: list[str]):
    """`await call()`, sent again after a transport error (a connection the server dropped), each error noted in
    `retries`."""
    for attempt in range(RETRIES + 1):
        try:
            return await call()
        except httpx.TransportError as exc:
            retries.append(f"{type(exc).__name__}: {exc}")
            if attempt == RETRIES:
                raise DirectFailed(f"{RETRIES + 1} attempts, the last: {retries[-1]}") from exc


def decisions(n: int) -> list[tuple[str, list[str]]]:
    out = []
    for body in map(orjson.loads, workload.generate(n * 3, seed=11, repeat_share=0.0)):
        if body.get("candidates") and len(out) < n:
            work = work_for(Request.from_data(body), "gpt-4o-mini")
            out.append((work.context, [c.text for c in work.request.candidates][:26]))
    return out


async def direct_decide(url: str, model: str, items, concurrency: int, retries: list[str]) -> float:
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url.rstrip("/") + "/", timeout=120.0, limits=LIMITS) as client:

        async def call(context, candidates):
            r = await client.post(
                "completions",
                json={
                    "model": model,
                    "prompt": engine_mod.choice_prompt(context, candidates),
                    "max_tokens": 1,
                    "temperature": 0.0,
                    "logprobs": engine_mod.DEFAULTS["top_logprobs"],
                },
            )
            r.raise_for_status()
            return r.json()

        async def one(context, candidates):
            async with slots:
                return await retried(lambda: call(context, candidates), retries)

        started = time.perf_counter()
        await asyncio.gather(*(one(c, cands) for c, cands in items))
        return time.perf_counter() - started


async def direct_stream(
    url: str, model: str, prompts: list[str], concurrency: int, max_tokens: int, retries: list[str]
) -> float:
    slots = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url.rstrip("/") + "/", timeout=300.0, limits=LIMITS) as client:

        async def call(prompt):
            payload = {
                "model": model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            async with client.stream("POST", "chat/completions", json=payload) as r:
                r.raise_for_status()
                async for _ in r.aiter_lines():
                    pass

        async def one(prompt):
            async with slots:
                await retried(lambda: call(prompt), retries)

        started = time.perf_counter()
        await asyncio.gather(*(one(p) for p in prompts))
        return time.perf_counter() - started


def jev_decide(engine, items) -> tuple[float, list]:
    started = time.perf_counter()
    results = engine.score_many(items)
    return time.perf_counter() - started, results


def jev_stream(engine, prompts: list[str], concurrency: int, max_tokens: int) -> float:
    from concurrent.futures import ThreadPoolExecutor

    def one(prompt):
        return "".join(engine.stream(prompt, max_tokens))

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, prompts))
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="", help="the server's base URL (default: start the local llama.cpp server)")
    ap.add_argument(
        "--model",
        default="smollm2-server",
        help="the pool entry (engine openai) of the served model: its tokenizer counts Jev's side",
    )
    ap.add_argument("--decisions", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--generate", type=int, default=6, help="streamed answers per round each way (0: none)")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()
    config = {k: getattr(args, k) for k in ("decisions", "concurrency", "rounds", "generate", "max_tokens")}
    server = None
    url = args.url
    if not url:
        from infra.model_server import ModelServer, idle_cores, missing

        why = missing()
        if why:
            print(json.dumps({"skipped": why, "config": config}))
            return 0
        server = ModelServer(threads=idle_cores(), slots=args.concurrency).start()
        url = server.url
        config.update(server_threads=server.threads, server_slots=server.slots)
    retries: list[str] = []
    try:
        model = httpx.get(url.rstrip("/") + "/models", timeout=30).json()["data"][0]["id"]
        entry = pool_mod.load()[args.model]
        spec = dataclasses.replace(
            entry,
            base_url=url,
            model=model,
            options={**entry.options, "max_concurrency": args.concurrency, "timeout_s": 120},
        )
        engine = engine_mod.OpenAIEngine(spec)
        items = decisions(args.decisions)
        prompts = [f"A customer asks: {c.splitlines()[0][:300]}\nAnswer in two sentences." for c, _ in items]
        prompts = prompts[: args.generate]
        # warm-up: every prompt in the server's cache
        asyncio.run(direct_decide(url, model, items, args.concurrency, retries))
        jev_decide(engine, items[:4])
        calls_before = http.calls(url.rstrip("/"))
        clock = {"direct": 0.0, "jev": 0.0, "direct_gen": 0.0, "jev_gen": 0.0}
        jev_tokens = server_tokens = 0
        for round_ in range(args.rounds):
            if round_ % 2 == 0:  # who goes first alternates: the server's prompt cache favours the second
                clock["direct"] += asyncio.run(direct_decide(url, model, items, args.concurrency, retries))
            seconds, results = jev_decide(engine, items)
            clock["jev"] += seconds
            if round_ % 2 == 1:
                clock["direct"] += asyncio.run(direct_decide(url, model, items, args.concurrency, retries))
            for r in results:
                if isinstance(r, ModelUnavailable):
                    raise r
                jev_tokens += r.input_tokens + r.output_tokens
                if r.server is not None:
                    server_tokens += r.server.prompt_tokens + r.server.completion_tokens
            if prompts:
                clock["direct_gen"] += asyncio.run(
                    direct_stream(url, model, prompts, args.concurrency, args.max_tokens, retries)
                )
                clock["jev_gen"] += jev_stream(engine, prompts, args.concurrency, args.max_tokens)
        decided = args.rounds * len(items)
        calls = http.calls(url.rstrip("/")) - calls_before - args.rounds * len(prompts)
        decide = {
            "decisions": decided,
            "concurrency": args.concurrency,
            "direct_decisions_per_s": round(decided / clock["direct"], 2),
            "jev_decisions_per_s": round(decided / clock["jev"], 2),
            "ratio_to_direct": round(clock["direct"] / clock["jev"], 3),
            "calls_per_decision": round(calls / decided, 3),
        }
        generate = {}
        if prompts:
            answered = args.rounds * len(prompts)
            generate = {
                "answers": answered,
                "max_tokens": args.max_tokens,
                "direct_answers_per_s": round(answered / clock["direct_gen"], 3),
                "jev_answers_per_s": round(answered / clock["jev_gen"], 3),
                "ratio_to_direct": round(clock["direct_gen"] / clock["jev_gen"], 3),
            }
        print(
            json.dumps(
                {
                    "config": config,
                    "server": url,
                    "model": model,
                    "pool_entry": args.model,
                    "tokenizer": spec.tokenizer,
                    "decide": decide,
                    "generate": generate,
                    "ratio_to_direct": decide["ratio_to_direct"],
                    "calls_per_decision": decide["calls_per_decision"],
                    "tokens_jev": jev_tokens,
                    "tokens_server": server_tokens,
                    "drift": round(server_tokens / jev_tokens - 1, 4) if jev_tokens and server_tokens else None,
                    "direct_retries": len(retries),
                    "direct_retry_errors": sorted(set(retries)),
                    "load_average": os.getloadavg()[0],
                }
            )
        )
    except (DirectFailed, ModelUnavailable) as exc:
        side = "the direct reference" if isinstance(exc, DirectFailed) else "Jev's engine"
        print(json.dumps({"config": config, "failed": f"{side}: {exc}", "direct_retries": len(retries)}))
        return 1
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
