"""Decision latency of the pipeline with and without a tenant running the heaviest analytics it is allowed.

Starts the local pipeline with the stage process apart (`jev worker stream`: it owns ClickHouse and serves the
query endpoints), preloads --rows usage rows into its ClickHouse (three tenants), then runs --waves pairs of
waves of --wave new requests each: a baseline wave with no analytics, and a loaded wave while one tenant token
keeps more than JEV_QUERY_CONCURRENCY heavy queries going on the owner's endpoint (a 4-way self cross join that
runs into JEV_QUERY_TIME_S, and a groupArray of 1 KB strings that runs into JEV_QUERY_MEMORY_MB). The two waves
of a pair are the two halves of one generated mix of requests; which goes first alternates from pair to pair,
and each is sent after the same --settle-s of quiet (baseline) or load (loaded), so both see the same machine
and the same idle time. The tenant's callers run in a process of their own and leave when their wave is done
(their running queries are cancelled by the owner, as for any caller that goes away). Latency = publish to
decision received, per request. The per-pair p50s are printed too: the spread the ratio is read against.
Last stdout line: one JSON object (baseline and loaded p50/p95 in ms, their ratios, tenant queries answered).

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
from workers import workload
from workers.analytics.owner import owner_file
from workers.pipeline import Pipeline, known_decision_types, percentile

GENERATE = (Path(__file__).with_name("queries.py").read_text().split('GENERATE = """', 1)[1].split('"""', 1)[0])
TOKEN = "bench-tenant-token-0123456789"
HEAVY = ["SELECT count() FROM usage_events a, usage_events b, usage_events c, usage_events d",
         "SELECT length(groupArray(repeat('x', 1000))) FROM usage_events a, usage_events b"]


def preload(dsn: str, rows: int) -> int:
    client = clickhouse.open_migrated(dsn)
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    client.command(GENERATE, parameters={"start": int(start.timestamp() * 1000), "step": 86400 * 1000 / (rows // 4),
                                         "offset": 0, "n": rows})
    stored = client.query("SELECT count() FROM usage_events").result_rows[0][0]
    client.close()
    return stored


def tenant_load(url: str, queries: list[str], stop: threading.Event, counts: dict) -> None:
    """One of the tenant's concurrent callers: `queries` back to back until `stop`."""
    i = 0
    while not stop.is_set():
        req = urllib.request.Request(url, data=orjson.dumps({"sql": queries[i % len(queries)]}), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
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


async def wave(producer, consumer, payloads: list[bytes]) -> list[float]:
    n, sent = len(payloads), {}
    for raw in payloads:
        sent[orjson.loads(raw)["request_id"]] = time.monotonic()
        await producer.send(name("requests"), raw)
    await producer.flush()
    latencies, deadline = [], time.monotonic() + 300
    while len(latencies) < n and time.monotonic() < deadline:
        for msgs in (await consumer.getmany(timeout_ms=100)).values():
            for msg in msgs:
                rid = orjson.loads(msg.value).get("request_id")
                if rid in sent:
                    latencies.append((time.monotonic() - sent.pop(rid)) * 1000)
    return latencies


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
            consumer = AIOKafkaConsumer(name("decisions"), bootstrap_servers=pipe.settings.bootstrap,
                                        auto_offset_reset="earliest", group_id=None)
            await producer.start()
            await consumer.start()
            try:
                await wave(producer, consumer, workload.generate(args.wave, seed=1000, repeat_share=0.0))  # warm-up
                base, loaded, counts, pairs = [], [], {"answered": 0}, []
                caller = [sys.executable, __file__, "--caller", url, "--callers", str(settings.query_concurrency + 1),
                          *(f"--query={q}" for q in args.query or HEAVY)]  # one caller more than allowed
                for i in range(args.waves):
                    pool = workload.generate(2 * args.wave, seed=2000 + i, repeat_share=0.0)
                    pair = {}
                    for phase in ("baseline", "loaded") if i % 2 == 0 else ("loaded", "baseline"):
                        half = pool[0::2] if phase == "baseline" else pool[1::2]  # both phases: halves of one mix
                        callers = subprocess.Popen(caller, stdout=subprocess.PIPE, text=True) \
                            if phase == "loaded" else None
                        await asyncio.sleep(args.settle_s)  # quiet, or the tenant's queries running
                        pair[phase] = await wave(producer, consumer, half)
                        (base if phase == "baseline" else loaded).extend(pair[phase])
                        if callers is not None:
                            callers.send_signal(signal.SIGTERM)
                            out, _ = await asyncio.to_thread(callers.communicate)
                            for key, n in orjson.loads(out.strip().splitlines()[-1]).items():
                                counts[key] = counts.get(key, 0) + n
                    pairs.append([percentile(pair["baseline"], 0.5), percentile(pair["loaded"], 0.5)])
                    print(f"pair {i}: p50 baseline {pairs[-1][0]:.0f} ms, loaded {pairs[-1][1]:.0f} ms", flush=True)
            finally:
                await producer.stop()
                await consumer.stop()
    return {"tenant_sql": args.query or HEAVY, "usage_rows": stored, "waves": args.waves, "wave": args.wave,
            "query_time_s": settings.query_time_s,
            "query_memory_mb": settings.query_memory_mb, "query_concurrency": settings.query_concurrency,
            "baseline_ms": {"p50": percentile(base, 0.5), "p95": percentile(base, 0.95), "n": len(base)},
            "loaded_ms": {"p50": percentile(loaded, 0.5), "p95": percentile(loaded, 0.95), "n": len(loaded)},
            "p50_ratio": round(percentile(loaded, 0.5) / max(percentile(base, 0.5), 1e-9), 3),
            "p95_ratio": round(percentile(loaded, 0.95) / max(percentile(base, 0.95), 1e-9), 3),
            "pair_p50_ms": pairs, "tenant_queries": counts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000, help="usage rows preloaded (tenants t0, t1, t2)")
    ap.add_argument("--waves", type=int, default=12, help="pairs of waves (baseline, loaded)")
    ap.add_argument("--wave", type=int, default=10, help="requests per wave")
    ap.add_argument("--settle-s", type=float, default=3.0, help="seconds the load runs before a loaded wave")
    ap.add_argument("--query", action="append", default=[], help="the tenant's queries instead of the heavy ones "
                                                                 "(e.g. 'SELECT 1': the sandbox's own cost)")
    ap.add_argument("--caller", metavar="URL", help=argparse.SUPPRESS)  # internal: run the tenant's callers
    ap.add_argument("--callers", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.caller:
        callers_main(args.caller, args.query or HEAVY, args.callers)
        return
    print(orjson.dumps(asyncio.run(run(args))).decode())


if __name__ == "__main__":
    main()
