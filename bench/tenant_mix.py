"""The shared runner of bench/hostile_load.py and bench/tenant_flood.py: decision latency of well-behaved tenants
(acme and globex) with and without a hostile tenant's load, side by side in one run.

The local pipeline runs with JEV_TENANT_RATES (--rates); --waves pairs of waves split one mix evenly, a baseline
wave alone and a loaded one right behind the hostile records, alternating order. Every record must come back as a
decision or a rejection (`silent` counts those that did not); the ratios are loaded over baseline per tier,
weighted by the requests each tier answered (tenant_load.ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from collections.abc import Callable

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from tenant_load import ratios, split, stats

from schemas.topics import name
from streams import settings as settings_mod
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

TENANTS = ("acme", "globex")


class Outcomes:
    """Follows the decisions and rejected topics: the first outcome of each request id, and when it arrived."""

    def __init__(self, bootstrap: str):
        self.consumer = AIOKafkaConsumer(
            name("decisions"),
            name("rejected"),
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=None,
            fetch_max_bytes=64 << 20,
        )
        self.seen: dict[str, tuple[float, str, str]] = {}  # request_id -> (monotonic time, tier or reason, kind)
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.task = asyncio.ensure_future(self.follow())

    async def follow(self) -> None:
        while True:
            for tp, msgs in (await self.consumer.getmany(timeout_ms=50)).items():
                now = time.monotonic()
                for msg in msgs:
                    record = orjson.loads(msg.value)
                    rid = record.get("request_id", "")
                    if rid and rid not in self.seen:
                        decided = tp.topic == name("decisions")
                        self.seen[rid] = (
                            now,
                            record.get("tier", "") if decided else record.get("reason", ""),
                            "decided" if decided else "rejected",
                        )

    async def wait(self, ids: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ids <= self.seen.keys() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.consumer.stop()


def rid(raw: bytes) -> str:
    return orjson.loads(raw)["request_id"]


async def wave(
    producer, outcomes: Outcomes, payloads: list[bytes], hostile: list[bytes], timeout: float
) -> list[tuple[float, str]]:
    """Publish `hostile` then `payloads`; (latency ms, tier) of each of `payloads` decided within `timeout`."""
    for raw in hostile:
        await producer.send(name("requests"), raw)
    sent = {}
    for raw in payloads:
        sent[rid(raw)] = time.monotonic()
        await producer.send(name("requests"), raw)
    await producer.flush()
    await outcomes.wait(set(sent), timeout)
    return [
        ((outcomes.seen[r][0] - t) * 1000, outcomes.seen[r][1])
        for r, t in sent.items()
        if r in outcomes.seen and outcomes.seen[r][2] == "decided"
    ]


def normal_mix(n: int, seed: int) -> list[bytes]:
    """n new requests of each well-behaved tenant (no repeats: every request does the same work either way)."""
    return [
        raw
        for i, tenant in enumerate(TENANTS)
        for raw in workload.generate(n, seed=seed * 10 + i, repeat_share=0.0, tenant=tenant)
    ]


async def run(args, hostile: Callable[[int], list[bytes]], describe: dict) -> dict:
    """`hostile(i)`: the hostile tenant's records of the i-th loaded wave (request ids unique across waves)."""
    with tempfile.TemporaryDirectory() as folder:
        settings = settings_mod.load().replace(data_dir=folder, tenant_rates=args.rates)
        async with Pipeline(settings, known_decision_types(settings.decision_types), stages_process=True) as pipe:
            producer = AIOKafkaProducer(
                bootstrap_servers=pipe.settings.bootstrap, linger_ms=1, max_request_size=4 << 20
            )
            outcomes = Outcomes(pipe.settings.bootstrap)
            await producer.start()
            await outcomes.start()
            base, loaded, pairs, hostile_ids, normal_ids = [], [], [], set(), set()
            try:
                warm = normal_mix(args.wave, 999)
                await wave(producer, outcomes, warm, [], args.timeout_s)
                for i in range(args.waves):
                    pool = normal_mix(args.wave, 1000 + i)
                    normal_ids |= {rid(raw) for raw in pool}
                    halves = split(pool, swap=i // 2 % 2)
                    pair = {}
                    for phase in ("baseline", "loaded") if i % 2 == 0 else ("loaded", "baseline"):
                        await asyncio.sleep(args.settle_s)
                        records = hostile(i) if phase == "loaded" else []
                        hostile_ids |= {rid(raw) for raw in records}
                        pair[phase] = await wave(producer, outcomes, halves[phase == "loaded"], records, args.timeout_s)
                        (base if phase == "baseline" else loaded).extend(pair[phase])
                    pairs.append([stats(pair["baseline"])["p50"], stats(pair["loaded"])["p50"]])
                    print(f"pair {i}: p50 baseline {pairs[-1][0]:.0f} ms, loaded {pairs[-1][1]:.0f} ms", flush=True)
                await outcomes.wait(hostile_ids | normal_ids, args.timeout_s)
            finally:
                await producer.stop()
                await outcomes.stop()
    answered = Counter(
        outcomes.seen[r][1] if outcomes.seen[r][2] == "rejected" else "decided"
        for r in hostile_ids
        if r in outcomes.seen
    )
    silent = len((hostile_ids | normal_ids) - outcomes.seen.keys())
    return {
        **describe,
        "tenant_rates": args.rates,
        "waves": args.waves,
        "wave": args.wave,
        "baseline_ms": stats(base),
        "loaded_ms": stats(loaded),
        **ratios(stats(base), stats(loaded)),
        "pair_p50_ms": pairs,
        "hostile_sent": len(hostile_ids),
        "outcomes": dict(answered),
        "rate_limited": answered.get("rate_limited", 0),
        "silent": silent,
    }


def parser(doc: str, rates: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--waves", type=int, default=4, help="pairs of waves (baseline, loaded)")
    ap.add_argument("--wave", type=int, default=10, help="requests per well-behaved tenant (acme, globex) per wave")
    ap.add_argument("--settle-s", type=float, default=2.0, help="seconds of quiet before each wave")
    ap.add_argument("--timeout-s", type=float, default=300.0, help="most seconds to wait for a wave's decisions")
    ap.add_argument("--rates", default=rates, help="JEV_TENANT_RATES for the run")
    return ap
