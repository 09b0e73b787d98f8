"""The HTTP gateway against the client library: the same decisions, at the same paced rate, through
`POST /v1/decisions` (the gateway in its own process, `jev gateway`) and through JevClient straight over Kafka.

Pipeline: the local broker, the stages (in this process, beside both sides' load generators; --stages-process: a
child process of their own), one scoring worker, lexical scoring.
The workload's decide requests are sent once each way first (warm-up: the L1 cache holds their answers), then the
timed runs send them again under new ids, so both sides measure the rules/cache path. Each trial runs the client
side, then the gateway side, each --rate requests/s for --seconds; a request's latency is from its send to its
decision in hand (the HTTP reply's body read, or the client's future). A side's throughput is its decisions over
the time from its first send to its last decision. Then --streams streamed answers (a generate request, stream
true, the extractive generator) each way: the time to the first chunk (the first SSE `data:` line through the
gateway, the first Chunk through the client).

Last stdout line: {ratio_to_client (gateway throughput / client throughput, the median trial, of an even count
the lower middle), p50_added_ms and p99_added_ms (the gateway's latency percentile minus the client's, pooled over
the trials), first_chunk_ms (median through the gateway), first_chunk_ms_client, gateway_cpu_ms_per_decision (the
gateway process's CPU over its timed runs, per decision: its cost, whatever the machine's load), client, gateway
(each side's decided, throughput, p50/p99, tiers), trials, config}.

    .venv/bin/python bench/gateway.py [--rate 50] [--seconds 10] [--trials 2] [--streams 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import orjson

from streams import settings as settings_mod
from streams.runtime.client import JevClient
from workers.harness import workload
from workers.harness.pipeline import Pipeline, cpu_seconds, free_port, known_decision_types, percentile
from workers.processes.gateway import keys_for

DROPPED = ("tenant", "request_id", "created_at")  # the gateway takes the tenant from the key; ids are new per run
QUESTION = "How long does delivery to Lyon take?\nReference: parcels to Lyon leave within 2 hours and arrive in 3 days."


def log(msg: str) -> None:
    print(f"[gateway bench] {msg}", file=sys.stderr, flush=True)


def decide_bodies(n: int, seed: int) -> list[dict]:
    """The workload's decide requests (no streams, no repeats) as bodies without tenant or id."""
    bodies = [orjson.loads(p) for p in workload.generate(n, seed=seed, repeat_share=0.0)]
    return [
        {k: v for k, v in b.items() if k not in DROPPED}
        for b in bodies
        if isinstance(b.get("candidates"), list) and b.get("state") and b.get("kind", "decide") == "decide"
    ]


async def paced(bodies: list[dict], rate: float, seconds: float, send) -> dict:
    """`send(body, request_id)` -> Decision-like dict, for rate * seconds bodies (cycled) at `rate` per second."""
    count = max(1, int(rate * seconds))
    latencies, tiers, failed = [], Counter(), Counter()
    done_at: list[float] = []

    async def one(body: dict, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        start = time.monotonic()
        try:
            tier = await send(body, f"bench-{uuid.uuid4().hex}")
        except Exception as exc:  # a failed call is counted, never hidden in a mean
            failed[type(exc).__name__] += 1
            return
        end = time.monotonic()
        latencies.append((end - start) * 1000)
        done_at.append(end)
        tiers[tier] += 1

    t0 = time.monotonic() + 0.2
    await asyncio.gather(*(one(bodies[i % len(bodies)], t0 + i / rate) for i in range(count)))
    span = (max(done_at) - t0) if done_at else float("inf")
    return {
        "sent": count,
        "decided": len(latencies),
        "failed": dict(failed),
        "decisions_per_s": round(len(latencies) / span, 1),
        "p50_ms": percentile(latencies, 0.5),
        "p99_ms": percentile(latencies, 0.99),
        "tiers": dict(tiers),
        "latencies": latencies,
    }


async def start_gateway(settings, port: int, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.cli.main", "gateway", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        cwd=Path(__file__).resolve().parents[1],
    )
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            try:
                async with http.get(f"http://127.0.0.1:{port}/health") as r:
                    if r.status == 200:
                        return proc
            except aiohttp.ClientError:
                pass
            if proc.poll() is not None:
                raise SystemExit(f"jev gateway exited with {proc.returncode}")
            await asyncio.sleep(0.1)
    raise SystemExit("jev gateway did not answer /health within 30 s")


async def first_chunk_via_gateway(http, url: str, key: str, model: str) -> float:
    body = {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": f"{QUESTION}\n({uuid.uuid4().hex[:6]})"}],
    }
    start = time.monotonic()
    async with http.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        async for line in r.content:
            if line.startswith(b"data: "):
                first = (time.monotonic() - start) * 1000
                async for _ in r.content:  # read to the end: the next stream starts on an idle pipeline
                    pass
                return first
    raise RuntimeError(f"no chunk through the gateway (HTTP {r.status})")


async def first_chunk_via_client(client: JevClient) -> float:
    start = time.monotonic()
    first = None
    async for _ in client.stream(f"{QUESTION}\n({uuid.uuid4().hex[:6]})"):
        first = first or (time.monotonic() - start) * 1000
    return first


async def run(args) -> dict:
    base = settings_mod.load()
    with tempfile.TemporaryDirectory(prefix="jev-gateway-bench-") as tmp:
        settings = base.replace(data_dir=tmp, backend=args.backend, shadow_rate="0")
        bodies = decide_bodies(args.requests, args.seed)
        async with Pipeline(settings, known_decision_types(), stages_process=args.stages_process) as pipe:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            _, key = keys_for(pipe.settings).add(args.tenant)
            gateway = await start_gateway(pipe.settings, port, pipe.child_env())
            try:
                async with (
                    JevClient(args.tenant, settings=pipe.settings, service="bench", timeout=60) as client,
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
                ):
                    model = (
                        await (await http.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})).json()
                    )["data"][0]["id"]

                    async def via_client(body: dict, rid: str) -> str:
                        d = await client.decide(
                            body["state"],
                            body["candidates"],
                            request_id=rid,
                            **{k: v for k, v in body.items() if k not in ("state", "candidates")},
                        )
                        return d.tier

                    async def via_gateway(body: dict, rid: str) -> str:
                        async with http.post(
                            f"{url}/v1/decisions",
                            data=orjson.dumps(body),
                            headers={"Authorization": f"Bearer {key}", "Idempotency-Key": rid},
                        ) as r:
                            answer = await r.json(loads=orjson.loads)
                            if r.status != 200:
                                raise RuntimeError(f"HTTP {r.status}: {answer['error']['code']}")
                            return answer["tier"]

                    log(f"warm-up: {len(bodies)} decide requests each way")
                    for send in (via_client, via_gateway):
                        await paced(bodies, 50.0, len(bodies) / 50.0, send)
                    trials, gateway_cpu_s = [], 0.0
                    for trial in range(args.trials):
                        c = await paced(bodies, args.rate, args.seconds, via_client)
                        before = cpu_seconds(gateway.pid)
                        g = await paced(bodies, args.rate, args.seconds, via_gateway)
                        gateway_cpu_s += cpu_seconds(gateway.pid) - before
                        ratio = round(g["decisions_per_s"] / c["decisions_per_s"], 3) if c["decisions_per_s"] else 0.0
                        trials.append({"client": c, "gateway": g, "ratio_to_client": ratio})
                        log(
                            f"trial {trial}: client {c['decisions_per_s']}/s p50 {c['p50_ms']} p99 {c['p99_ms']} ms; "
                            f"gateway {g['decisions_per_s']}/s p50 {g['p50_ms']} p99 {g['p99_ms']} ms; ratio {ratio}"
                        )
                    first_gw = [await first_chunk_via_gateway(http, url, key, model) for _ in range(args.streams)]
                    first_cl = [await first_chunk_via_client(client) for _ in range(args.streams)]
            finally:
                gateway.terminate()
                gateway.wait(10)
    median = sorted(trials, key=lambda t: t["ratio_to_client"])[(len(trials) - 1) // 2]  # the lower of two middles
    pooled = {side: [x for t in trials for x in t[side]["latencies"]] for side in ("client", "gateway")}

    def summary(side: str) -> dict:
        return {
            "decided": sum(t[side]["decided"] for t in trials),
            "sent": sum(t[side]["sent"] for t in trials),
            "failed": sum((Counter(t[side]["failed"]) for t in trials), Counter()),
            "decisions_per_s": median[side]["decisions_per_s"],
            "p50_ms": percentile(pooled[side], 0.5),
            "p99_ms": percentile(pooled[side], 0.99),
            "tiers": sum((Counter(t[side]["tiers"]) for t in trials), Counter()),
        }

    for t in trials:
        for side in ("client", "gateway"):
            del t[side]["latencies"]
    client_side, gateway_side = summary("client"), summary("gateway")
    return {
        "ratio_to_client": median["ratio_to_client"],
        "p50_added_ms": round(gateway_side["p50_ms"] - client_side["p50_ms"], 2),
        "p99_added_ms": round(gateway_side["p99_ms"] - client_side["p99_ms"], 2),
        "first_chunk_ms": round(statistics.median(first_gw), 1),
        "first_chunk_ms_client": round(statistics.median(first_cl), 1),
        "gateway_cpu_ms_per_decision": round(gateway_cpu_s * 1000 / max(gateway_side["decided"], 1), 3),
        "client": client_side,
        "gateway": gateway_side,
        "trials": trials,
        "config": {
            "rate": args.rate,
            "seconds": args.seconds,
            "trials": args.trials,
            "streams": args.streams,
            "distinct_requests": len(bodies),
            "backend": args.backend,
            "generator": base.generator,
            "stages_process": args.stages_process,
            "scorers": 1,
            "cpus": os.cpu_count(),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=50.0, help="decisions per second offered to each side (default 50)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds of each side's paced run (default 10)")
    p.add_argument("--trials", type=int, default=2, help="client/gateway pairs; the median ratio is kept (default 2)")
    p.add_argument("--streams", type=int, default=5, help="streamed answers timed each way (default 5)")
    p.add_argument("--requests", type=int, default=200, help="workload requests the decide bodies come from")
    p.add_argument("--backend", default="lexical", help="fine tier of the pipeline (default lexical)")
    p.add_argument("--tenant", default="acme", help="the tenant both sides send for (the workload's)")
    p.add_argument("--seed", type=int, default=7, help="workload seed")
    p.add_argument(
        "--stages-process",
        action="store_true",
        help="run the stages in a child process (as deployed); default: in this process, beside both load generators",
    )
    args = p.parse_args()
    print(orjson.dumps(asyncio.run(run(args))).decode())


if __name__ == "__main__":
    main()
