"""What each reply's copy on its tenant's own topic costs the Sender: outboxes of --decisions decisions delivered
to the local broker with the all-tenant topic only (decisions without a tenant), then also to their tenants' reply
topics (--tenants tenants, one of them Chinese), --repeat rounds each; the median round's stage CPU and wall time.
Last stdout line: one JSON object (`internal_only`, `with_tenant_copy`, `cpu_us_per_decision_added`).

    .venv/bin/python bench/reply_copies.py [--decisions N] [--tenants T] [--repeat R]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import orjson

from infra.broker import LocalBroker, create_topics
from schemas.records import Decision
from schemas.topics import name
from streams.core.outbox import Outbox
from streams.runtime.sender import Sender


def outbox(label: str, n: int, tenants: list[str]) -> Outbox:
    return Outbox(
        decisions=[
            (Decision(request_id=f"{label}-{i}", tier="rules", text="x" * 200, tenant=tenants[i % len(tenants)]), {})
            for i in range(n)
        ]
    )


async def measure(bootstrap: str, n: int, tenants: list[str], repeat: int) -> dict:
    await create_topics(bootstrap, [name("decisions")], 4)
    sender = Sender(bootstrap, 4)
    await sender.start()
    out = {}
    try:
        for label, names in (("internal_only", [""]), ("with_tenant_copy", tenants)):
            await sender.deliver(outbox(f"{label}-warm", 200, names))  # topics created, metadata read
            cpu, wall = [], []
            for r in range(repeat):
                box = outbox(f"{label}-{r}", n, names)
                c, t = time.process_time(), time.perf_counter()
                await sender.deliver(box)
                cpu.append((time.process_time() - c) * 1000)
                wall.append((time.perf_counter() - t) * 1000)
            out[label] = {"cpu_ms": round(statistics.median(cpu), 1), "wall_ms": round(statistics.median(wall), 1)}
    finally:
        await sender.stop()
    added = out["with_tenant_copy"]["cpu_ms"] - out["internal_only"]["cpu_ms"]
    return {"decisions": n, "tenants": len(tenants), **out, "cpu_us_per_decision_added": round(added * 1000 / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--decisions", type=int, default=2000, help="decisions per outbox (default 2000)")
    parser.add_argument("--tenants", type=int, default=4, help="tenants they answer, the last Chinese (default 4)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per variant; the median counts (default 5)")
    args = parser.parse_args()
    if args.decisions < 1 or args.tenants < 1 or args.repeat < 1:
        parser.error("--decisions, --tenants and --repeat must be at least 1")
    tenants = [f"tenant{i}" for i in range(args.tenants - 1)] + ["客服"]
    with LocalBroker(log=None) as broker:
        result = asyncio.run(measure(broker.url.removeprefix("kafka://"), args.decisions, tenants, args.repeat))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
