"""Atomic budget reservations under concurrency: throughput and overshoot against one hard budget.

1,000 concurrent reservations (asyncio tasks, then threads) race for one hard token budget that fits
only part of them; each reserves input + max output, "calls the model", and settles with its actuals.
Side by side, a gateway that checks spend before the call and adds it after (the usual failure) runs
the same traffic. Last stdout line: one JSON object (reservations_per_s, overshoot_tokens; target 0).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
import time

from schemas.records import Control
from streams.ingest.budgets import BudgetBook, Reservation

SCOPES = ["all:*", "tenant:bench", "service:search", "decision_type:ranking", "user:u1"]


def new_book(hard_tokens: int) -> BudgetBook:
    book = BudgetBook()
    book.apply(Control(kind="budget", key="tenant:bench", value={"hard_tokens": hard_tokens, "soft_tokens": hard_tokens}))
    return book


def spent(book: BudgetBook) -> int:
    u = book.usage["tenant:bench@day"]
    return u.used_tokens + u.reserved_tokens


async def run_asyncio(sizes: list[tuple[int, int]], hard: int) -> tuple[int, int]:
    book, peak = new_book(hard), [0]

    async def one(asked: int, actual: int):
        await asyncio.sleep(0)
        r = book.reserve(SCOPES, asked, asked * 1e-6)
        peak[0] = max(peak[0], spent(book))
        if isinstance(r, Reservation):
            await asyncio.sleep(random.random() * 0.01)  # the model call
            book.settle(r, actual, actual * 1e-6)

    await asyncio.gather(*(one(a, b) for a, b in sizes))
    return max(0, peak[0] - hard), max(0, book.usage["tenant:bench@day"].used_tokens - hard)


def run_threads(sizes: list[tuple[int, int]], hard: int, workers: int = 8) -> tuple[int, int]:
    book, peak, lock = new_book(hard), [0], threading.Lock()

    def work(part):
        for asked, actual in part:
            r = book.reserve(SCOPES, asked, asked * 1e-6)
            with lock:
                peak[0] = max(peak[0], spent(book))
            if isinstance(r, Reservation):
                time.sleep(0)
                book.settle(r, actual, actual * 1e-6)

    threads = [threading.Thread(target=work, args=(sizes[i::workers],)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(0, peak[0] - hard), max(0, book.usage["tenant:bench@day"].used_tokens - hard)


async def run_check_after_call(sizes: list[tuple[int, int]], hard: int) -> int:
    """The failure mode: check spend, await the model, then add the actuals."""
    used = [0]

    async def one(asked: int, actual: int):
        await asyncio.sleep(0)
        if used[0] + asked <= hard:
            await asyncio.sleep(random.random() * 0.01)
            used[0] += actual

    await asyncio.gather(*(one(a, b) for a, b in sizes))
    return max(0, used[0] - hard)


def throughput(ops: int) -> float:
    book = new_book(10**12)
    start = time.perf_counter()
    for _ in range(ops):
        book.settle(book.reserve(SCOPES, 500, 0.0005), 400, 0.0004)
    return ops / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=1000, help="concurrent reservations")
    ap.add_argument("--ops", type=int, default=50_000, help="reserve+settle pairs for the throughput figure")
    args = ap.parse_args()
    rng = random.Random(7)
    random.seed(7)  # the simulated model-call latencies
    sizes = [(asked := rng.randint(200, 2000), rng.randint(asked // 2, asked)) for _ in range(args.limit)]
    hard = sum(a for a, _ in sizes) // 3  # room for about a third of them
    print(f"{args.limit} reservations against a hard budget of {hard} tokens", file=sys.stderr)
    asyncio_peak, asyncio_used = asyncio.run(run_asyncio(sizes, hard))
    print(f"asyncio: peak overshoot {asyncio_peak}", file=sys.stderr)
    thread_peak, thread_used = run_threads(sizes, hard)
    print(f"threads: peak overshoot {thread_peak}", file=sys.stderr)
    naive = asyncio.run(run_check_after_call(sizes, hard))
    print(f"check-after-call gateway: overshoot {naive}", file=sys.stderr)
    rate = throughput(args.ops)
    print(json.dumps({
        "concurrent_reservations": args.limit, "hard_tokens": hard,
        "reservations_per_s": round(rate), "overshoot_tokens": max(asyncio_peak, asyncio_used, thread_peak, thread_used),
        "overshoot_tokens_asyncio": max(asyncio_peak, asyncio_used),
        "overshoot_tokens_threads": max(thread_peak, thread_used),
        "check_after_call_overshoot_tokens": naive,
    }))


if __name__ == "__main__":
    main()
