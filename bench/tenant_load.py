"""Decision latency of the pipeline with and without a tenant running the heaviest analytics it is allowed.

The local pipeline (the stage process apart, owning ClickHouse) is preloaded with --rows usage rows; then --waves
pairs of waves of --wave requests: a baseline wave, and a loaded wave while one tenant token keeps more than
JEV_QUERY_CONCURRENCY heavy queries running (a cross join into JEV_QUERY_TIME_S, a groupArray into
JEV_QUERY_MEMORY_MB). The two waves of a pair split one mix evenly and alternate order. Latency = publish to
decision received. Last stdout line: baseline and loaded p50/p95/mean per tier and the loaded/baseline ratios.

    .venv/bin/python bench/tenant_load.py [--rows 300000] [--waves 12] [--wave 10]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra import clickhouse
from schemas.topics import name
from streams import settings as settings_mod
from workers.analytics.owner import owner_file
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types, percentile

GENERATE = Path(__file__).with_name("queries.py").read_text().split('GENERATE = """', 1)[1].split('"""', 1)[0]
TOKEN = "bench-tenant-token-0123456789"
HEAVY = [
    "SELECT count() FROM usage_events a, usage_events b, usage_events c, usage_events d",
    "SELECT length(groupArray(repeat('x', 1000))) FROM usage_events a, usage_events b",
]


def preload(dsn: str, rows: int) -> int:
    client = clickhouse.open_migrated(dsn)
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    client.command(
        GENERATE,
        parameters={"start": int(start.timestamp() * 1000), "step": 86400 * 1000 / (rows // 4), "offset": 0, "n": rows},
    )
    stored = client.query("SELECT count() FROM usage_events").result_rows[0][0]
    client.close()
    return stored


def tenant_load(url: str, queries: list[str], stop: threading.Event, counts: dict) -> None:
    """One of the tenant's concurrent callers: `queries` back to back until `stop`."""
    i = 0
    while not stop.is_set():
        req = urllib.request.Request(
            url,
            data=orjson.dumps({"sql": queries[i % len(queries)]}),
            method="POST",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        i += 1
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                resp.read()
                counts["answered"] += 1
        except urllib.error.HTTPError as e:
            error = orjson.loads(e.read()).get("error", "")
            key = error.split(" ", 1)[0] if e.code == 400 else str(e.code)
            counts[key] = counts.get(key, 0) + 1
            if e.code == 429:
                time.sleep(0.2)


def callers_main(url: str, queries: list[str], n: int) -> None:
    """The tenant's side, in a process of its own (not the one timing decisions): `n` concurrent callers until
    SIGTERM, then their outcome counts as one JSON line and an exit that drops the calls still running."""
    stop, counts = threading.Event(), {"answered": 0}
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    for _ in range(n):
        threading.Thread(target=tenant_load, args=(url, queries, stop, counts), daemon=True).start()
    stop.wait()
    print(orjson.dumps(counts).decode(), flush=True)
    os._exit(0)


def split(pool: list[bytes], swap: bool) -> tuple[list[bytes], list[bytes]]:
    """Two halves of one mix with the same number of requests of each decision type (±1): the types take
    different paths (rules and local answers in tens of ms, the scoring tier in hundreds), so halves split
    blindly compare mixes, not load. `swap` trades the halves, so the one that gets the odd request alternates."""
    ordered = sorted(pool, key=lambda raw: orjson.loads(raw)["decision_type"])
    return (ordered[1::2], ordered[0::2]) if swap else (ordered[0::2], ordered[1::2])


async def wave(producer, consumer, payloads: list[bytes]) -> list[tuple[float, str]]:
    """(latency in ms, tier that answered) of each request of `payloads` decided within 300 s."""
    n, sent = len(payloads), {}
    for raw in payloads:
        sent[orjson.loads(raw)["request_id"]] = time.monotonic()
        await producer.send(name("requests"), raw)
    await producer.flush()
    latencies, deadline = [], time.monotonic() + 300
    while len(latencies) < n and time.monotonic() < deadline:
        for msgs in (await consumer.getmany(timeout_ms=100)).values():
            for msg in msgs:
                decision = orjson.loads(msg.value)
                if decision.get("request_id") in sent:
                    latencies.append(
                        ((time.monotonic() - sent.pop(decision["request_id"])) * 1000, decision.get("tier", ""))
                    )
    return latencies


def stats(timed: list[tuple[float, str]]) -> dict:
    """p50, p95 and mean of the latencies, and the count, p50 and p95 per tier that answered."""
    ms = [t for t, _ in timed]
    tiers = {tier: [t for t, k in timed if k == tier] for tier in sorted({tier for _, tier in timed})}
    return {
        "p50": percentile(ms, 0.5),
        "p95": percentile(ms, 0.95),
        "mean": round(sum(ms) / max(1, len(ms)), 2),
        "n": len(ms),
        "by_tier": {
            tier: {"n": len(t), "p50": percentile(t, 0.5), "p95": percentile(t, 0.95)} for tier, t in tiers.items()
        },
    }


def ratios(base: dict, loaded: dict) -> dict:
    """Loaded over baseline. The mix is bimodal (tiers answered in the stage process take tens of ms, the scoring
    tiers hundreds) and which tier answers is not fixed by the request alone, so a few requests more on the slow
    path move an overall percentile from one mode to the other: the headline p50 and p95 ratios compare each
    tier with itself, weighted by how many requests that tier answered in both phases (the same mix for both);
    the overall ones (`raw`) are beside them."""
    shared = [t for t in base["by_tier"] if t in loaded["by_tier"]]
    weight = {t: base["by_tier"][t]["n"] + loaded["by_tier"][t]["n"] for t in shared}
    out = {}
    for q in ("p50", "p95"):
        before = sum(weight[t] * base["by_tier"][t][q] for t in shared)
        out[f"{q}_ratio"] = round(sum(weight[t] * loaded["by_tier"][t][q] for t in shared) / max(before, 1e-9), 3)
        out[f"{q}_ratio_raw"] = round(loaded[q] / max(base[q], 1e-9), 3)
    out["ratio_by_tier"] = {
        t: {q: round(loaded["by_tier"][t][q] / max(base["by_tier"][t][q], 1e-9), 3) for q in ("p50", "p95")}
        for t in shared
    }
    return out


async def run(args) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        tokens = Path(folder) / "tokens.json"
        tokens.write_bytes(orjson.dumps({TOKEN: "t1"}))
        tokens.chmod(0o600)
        settings = settings_mod.load().replace(data_dir=folder, query_tokens=str(tokens))
        stored = preload(settings.clickhouse, args.rows)
        async with Pipeline(settings, known_decision_types(settings.decision_types), stages_process=True) as pipe:
            owner = orjson.loads(owner_file(pipe.settings.clickhouse).read_bytes())
            url = owner["url"]
            producer = AIOKafkaProducer(bootstrap_servers=pipe.settings.bootstrap, linger_ms=1)
            consumer = AIOKafkaConsumer(
                name("decisions"),
                bootstrap_servers=pipe.settings.bootstrap,
                auto_offset_reset="earliest",
                group_id=None,
            )
            await producer.start()
            await consumer.start()
            try:
                await wave(producer, consumer, workload.generate(args.wave, seed=1000, repeat_share=0.0))  # warm-up
                base, loaded, counts, pairs = [], [], {"answered": 0}, []
                caller = [
                    sys.executable,
                    __file__,
                    "--caller",
                    url,
                    "--callers",
                    str(settings.query_concurrency + 1),
                    *(f"--query={q}" for q in args.query or HEAVY),
                ]  # one caller more than allowed
                for i in range(args.waves):
                    halves = split(workload.generate(2 * args.wave, seed=2000 + i, repeat_share=0.0), swap=i // 2 % 2)
                    pair = {}
                    for phase in ("baseline", "loaded") if i % 2 == 0 else ("loaded", "baseline"):
                        half = halves[phase == "loaded"]
                        callers = (
                            subprocess.Popen(caller, stdout=subprocess.PIPE, text=True) if phase == "loaded" else None
                        )
                        await asyncio.sleep(args.settle_s)  # quiet, or the tenant's queries running
                        pair[phase] = await wave(producer, consumer, half)
                        (base if phase == "baseline" else loaded).extend(pair[phase])
                        if callers is not None:
                            callers.send_signal(signal.SIGTERM)
                            out, _ = await asyncio.to_thread(callers.communicate)
                            for key, n in orjson.loads(out.strip().splitlines()[-1]).items():
                                counts[key] = counts.get(key, 0) + n
                    pairs.append([stats(pair["baseline"])["p50"], stats(pair["loaded"])["p50"]])
                    print(f"pair {i}: p50 baseline {pairs[-1][0]:.0f} ms, loaded {pairs[-1][1]:.0f} ms", flush=True)
            finally:
                await producer.stop()
                await consumer.stop()
    return {
        "tenant_sql": args.query or HEAVY,
        "usage_rows": stored,
        "waves": args.waves,
        "wave": args.wave,
        "query_time_s": settings.query_time_s,
        "query_yield_s": settings.query_yield_s,
        "query_memory_mb": settings.query_memory_mb,
        "query_concurrency": settings.query_concurrency,
        "baseline_ms": stats(base),
        "loaded_ms": stats(loaded),
        **ratios(stats(base), stats(loaded)),
        "pair_p50_ms": pairs,
        "tenant_queries": counts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000, help="usage rows preloaded (tenants t0, t1, t2)")
    ap.add_argument("--waves", type=int, default=12, help="pairs of waves (baseline, loaded)")
    ap.add_argument("--wave", type=int, default=10, help="requests per wave")
    ap.add_argument("--settle-s", type=float, default=3.0, help="seconds of quiet (or of load) before each wave")
    ap.add_argument(
        "--query",
        action="append",
        default=[],
        help="the tenant's queries instead of the heavy ones (e.g. 'SELECT 1': the sandbox's own cost)",
    )
    ap.add_argument("--caller", metavar="URL", help=argparse.SUPPRESS)  # internal: run the tenant's callers
    ap.add_argument("--callers", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.caller:
        callers_main(args.caller, args.query or HEAVY, args.callers)
        return
    print(orjson.dumps(asyncio.run(run(args))).decode())


if __name__ == "__main__":
    main()
