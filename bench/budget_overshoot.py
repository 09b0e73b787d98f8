"""Atomic budget reservations under concurrency: throughput and overshoot against one hard budget.

1,000 concurrent reservations race for a hard token budget that fits only part of them, beside a gateway that
checks spend before the call and adds it after (the usual failure). --processes N spreads them over N processes
with the stage process's lease runtime on the local broker, beside N processes that each enforce their own view.
`overshoot_tokens` counts tokens spent past the limit (target 0); `processes.stranded_tokens` what the leased run
left unspent while requests were refused. Last stdout line: one JSON object.

    .venv/bin/python bench/budget_overshoot.py [--processes 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
import time
from pathlib import Path

from schemas.records import Control
from streams.budgets.book import BudgetBook, Reservation

SCOPES = ["all:*", "tenant:bench", "service:search", "decision_type:ranking", "user:u1"]


def new_book(hard_tokens: int) -> BudgetBook:
    book = BudgetBook()
    book.apply(
        Control(kind="budget", key="tenant:bench", value={"hard_tokens": hard_tokens, "soft_tokens": hard_tokens})
    )
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


def per_process_books(sizes: list[tuple[int, int]], hard: int, processes: int) -> int:
    """Overshoot when each process enforces its own view of the budget (no leases): each admits up to the limit."""
    spent = 0
    for i in range(processes):
        book = new_book(hard)
        for asked, actual in sizes[i::processes]:
            r = book.reserve(SCOPES, asked, asked * 1e-6)
            if isinstance(r, Reservation):
                book.settle(r, actual, actual * 1e-6)
                spent += actual
    return max(0, spent - hard)


async def lease_child(bootstrap: str, app_id: str, hard: int, sizes: list[tuple[int, int]], share: float) -> dict:
    """One stage process's budget runtime against the shared owner group: reserve all `sizes` concurrently."""
    from aiokafka import AIOKafkaProducer

    from schemas.records import Decision, Request, Work
    from streams.runtime.leases import BudgetOwner, LeaseClient
    from streams.security import signing

    book = new_book(hard)
    book.leased_tokens = True
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()

    async def send(topic, values):
        await asyncio.gather(
            *[
                await producer.send(topic, value, partition=p, headers=signing.headers(topic, value))
                for p, value in values
            ]
        )

    owner = BudgetOwner(bootstrap, app_id, book, send, lease_s=10.0, grace_s=30.0)
    client = LeaseClient(bootstrap, app_id, 4, book, send, share, lease_s=10.0, wait_s=10.0)
    tasks = [asyncio.create_task(owner.run()), asyncio.create_task(client.run())]
    spent, admitted, refused = 0, 0, 0
    await asyncio.sleep(4.0)  # the owner group settles (the local broker answers JoinGroup after ~3 s)

    async def one(i: int, asked: int, actual: int) -> None:
        nonlocal spent, admitted, refused
        work = Work(
            request=Request(
                request_id=f"{client.id}-{i}",
                tenant="bench",
                service="search",
                decision_type="ranking",
                user_id="u1",
                state="bench",
            ),
            admitted_at=time.time(),
            model="gpt-4o-mini",
            context_tokens=asked,
        )
        hold = await client.reserve(work, asked)
        if hold is None or not hasattr(hold, "leases"):
            refused += 1
            return
        admitted += 1
        await asyncio.sleep(random.random() * 0.01)  # the model call
        spent += actual
        work.budget_holds, work.budget_tokens = hold.leases, hold.tokens
        work.decision = Decision(request_id=work.request.request_id, tier="fine", input_tokens=actual)
        await client.settle([work])

    started = time.perf_counter()
    await asyncio.gather(*(one(i, a, b) for i, (a, b) in enumerate(sizes)))
    wall = time.perf_counter() - started
    client.stopping.set()
    owner.stopping.set()
    await asyncio.gather(*tasks)
    await producer.stop()
    return {
        "spent": spent,
        "admitted": admitted,
        "refused": refused,
        "wall_s": round(wall, 2),
        "owned_partitions": sorted(owner.owners),
    }


def run_processes(sizes: list[tuple[int, int]], hard: int, processes: int, share: float) -> dict:
    """Start the local broker and N children (this file with --child), each with its share of the requests."""
    import os
    import subprocess
    import tempfile

    from infra.broker import LocalBroker, create_topics
    from schemas.topics import name

    with LocalBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        bootstrap = broker.url.removeprefix("kafka://")
        asyncio.run(create_topics(bootstrap, [name("budget"), name("leases")], 4))
        children = []
        for i in range(processes):
            path = Path(tmp) / f"sizes-{i}.json"
            path.write_text(json.dumps(sizes[i::processes]))
            children.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        bootstrap,
                        "--hard",
                        str(hard),
                        "--sizes",
                        str(path),
                        "--share",
                        str(share),
                    ],
                    stdout=subprocess.PIPE,
                    env={**os.environ, "PYTHONHASHSEED": str(i)},
                )
            )
        results = [json.loads(c.communicate(timeout=600)[0].splitlines()[-1]) for c in children]
    spent = sum(r["spent"] for r in results)
    return {
        "processes": processes,
        "lease_share": share,
        "spent_tokens": spent,
        "admitted": sum(r["admitted"] for r in results),
        "refused": sum(r["refused"] for r in results),
        "overshoot_tokens": max(0, spent - hard),
        "stranded_tokens": max(0, hard - spent),
        "per_process": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=1000, help="concurrent reservations")
    ap.add_argument("--ops", type=int, default=50_000, help="reserve+settle pairs for the throughput figure")
    ap.add_argument("--processes", type=int, default=1, help="stage processes sharing the budget through leases")
    ap.add_argument("--share", type=float, default=0.05, help="share of the hard limit one lease asks for")
    ap.add_argument("--child", metavar="BOOTSTRAP", help=argparse.SUPPRESS)
    ap.add_argument("--hard", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        sizes = [tuple(s) for s in json.loads(Path(args.sizes).read_text())]
        print(json.dumps(asyncio.run(lease_child(args.child, "bench", args.hard, sizes, args.share))))
        return
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
    fleet = {}
    if args.processes > 1:
        fleet = run_processes(sizes, hard, args.processes, args.share)
        fleet["per_process_books_overshoot_tokens"] = per_process_books(sizes, hard, args.processes)
        print(
            f"{args.processes} processes with leases: overshoot {fleet['overshoot_tokens']}; with a book each: "
            f"{fleet['per_process_books_overshoot_tokens']}",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "concurrent_reservations": args.limit,
                "hard_tokens": hard,
                "reservations_per_s": round(rate),
                "overshoot_tokens": max(asyncio_peak, asyncio_used, thread_peak, thread_used),
                "overshoot_tokens_asyncio": max(asyncio_peak, asyncio_used),
                "overshoot_tokens_threads": max(thread_peak, thread_used),
                "check_after_call_overshoot_tokens": naive,
                **({"processes": fleet} if fleet else {}),
            }
        )
    )


if __name__ == "__main__":
    main()
