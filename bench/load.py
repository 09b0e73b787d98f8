"""Load: the local pipeline at rising request rates, against a bare two-agent Faust pipeline on the same broker.

Paced steps at --rates find the highest rate the pipeline keeps up with (every request decided, >= 90% of the rate,
no queue building up); bursts of --burst requests, alternated --trials times with the bare reference (count tokens
→ the same ClickHouse sink) on the same requests, give decisions_per_s and ratio_to_bare (the median pair). Each
path (rules/cache, model) is then run at half its SUSTAINED capacity, found by --probes paced steps from 0.8 times
its burst rate (sustained_rate_per_s: the rules/cache path's), for its
p50/p95/p99 (goals: rules/cache p99 <= 100 ms, model path under the 800 ms decision timeout), with each step's
`cpu_cores`, `tiers` and the guard's `controls`. Last stdout line: {decisions_per_s, bare_events_per_s,
ratio_to_bare, p99_ms, lost, config, load_average, steps, half_capacity, cpu_ms_per_decision, ...}.

    .venv/bin/python bench/load.py [--rates 50,100,200,400] [--step-s 6] [--burst 8000] [--trials 3] [--backend lexical]
        [--half-s 20] [--model-burst 100] [--model-backend auto] [--probes 3] [--model-step-s 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

import orjson
from aiokafka import AIOKafkaProducer

from schemas.records import Control
from schemas.topics import name
from streams import settings as settings_mod
from streams.core.process import freeze_heap
from workers.analytics.lag import stage_lag
from workers.harness import workload
from workers.harness.chaos import Collector
from workers.harness.demo import latency_split
from workers.harness.pipeline import Pipeline, cpu_seconds, known_decision_types, percentile
from workers.harness.replay import read_topic

BARE_IN, BARE_USAGE = "bench.bare.requests", "bench.bare.usage"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def paced_publish(
    bootstrap: str, payloads: list[bytes], rate: float, sent_at: dict[str, float], topic: str = name("requests")
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        start = time.monotonic()
        for i, raw in enumerate(payloads):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at[orjson.loads(raw)["request_id"]] = time.monotonic()
            await producer.send(topic, raw)
        await producer.flush()
    finally:
        await producer.stop()


HOPS = ("requests", "distilled", "score", "scored", "decisions")


async def hop_latencies(bootstrap: str, ids: set[str]) -> dict[str, float]:
    """Median delay between a request's message on one topic and the next (Kafka CreateTime), in ms:
    where the time goes, stage by stage (score → scored is the scoring worker; ingest answers L1 hits and rule
    matches straight to decisions, the cache agent its other hits from distilled)."""
    from aiokafka import AIOKafkaConsumer

    seen: dict[str, dict[str, int]] = {hop: {} for hop in HOPS}
    for hop in HOPS:
        consumer = AIOKafkaConsumer(
            name(hop), bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", fetch_max_wait_ms=50
        )
        await consumer.start()
        try:
            while batch := await consumer.getmany(timeout_ms=1000):
                for msg in (m for msgs in batch.values() for m in msgs):
                    body = orjson.loads(msg.value)
                    rids = (
                        [w["request"]["request_id"] for w in body["items"]]
                        if "items" in body
                        else [body.get("request_id")]
                    )
                    for rid in rids:
                        if rid in ids:
                            seen[hop].setdefault(rid, msg.timestamp)
        finally:
            await consumer.stop()
    out = {}
    for a, b in (("requests", "distilled"), ("distilled", "score"), ("score", "scored"), ("scored", "decisions")):
        deltas = [seen[b][r] - seen[a][r] for r in seen[b] if r in seen[a]]
        out[f"{a}->{b}"] = percentile(deltas, 0.5)
    hits = [
        seen["decisions"][r] - seen["distilled"][r]
        for r in seen["decisions"]
        if r in seen["distilled"] and r not in seen["score"]
    ]
    out["distilled->decisions (cache agent hits)"] = percentile(hits, 0.5)
    local = [
        seen["decisions"][r] - seen["requests"][r]
        for r in seen["decisions"]
        if r in seen["requests"] and r not in seen["distilled"]
    ]
    out["requests->decisions (answered in ingest)"] = percentile(local, 0.5)
    return out


@contextlib.asynccontextmanager
async def following_decisions(bootstrap: str, warm: list[bytes], rate: float, timeout: float):
    """A Collector reading the decisions while the block runs, once `warm` was published at `rate` and waited for
    (up to `timeout` s): yields (collector, sent_at)."""
    collector = Collector(bootstrap)
    following = asyncio.create_task(collector.run())
    sent_at: dict[str, float] = {}
    try:
        await paced_publish(bootstrap, warm, rate, sent_at)
        await collector.wait_for(workload.request_ids(warm), timeout)
        yield collector, sent_at
    finally:
        collector.stopping.set()
        await following


def tagged(payloads: list[bytes], tag: str, n: int | None = None) -> list[bytes]:
    """The payloads under new request ids `<tag>-<i>`, cycled to n of them (each once by default)."""
    n = len(payloads) if n is None else n
    return [orjson.dumps({**orjson.loads(payloads[i % len(payloads)]), "request_id": f"{tag}-{i}"}) for i in range(n)]


def rules_or_cache(tier: str) -> bool:
    return tier == "rules" or tier.startswith("cache")


def paced_result(collector: Collector, sent_at: dict, ids: list[str], t0: float, rate: float, in_path) -> dict:
    """What a paced run of `ids` (in publishing order) at `rate` gave: whether the pipeline kept up (every request
    decided, at >= 90% of the offered rate, and no queue building up: the median latency of the last third of the
    requests within twice the first third's plus 100 ms), and the p50/p95/p99 of the path's decisions (`in_path(tier)`)
    from publishing to decision read, with each decision's own split: queue_ms (admission to the start of the work
    that decided it) and service_ms (the rest, to postprocess)."""
    done = [i for i in ids if i in collector.first_seen]
    latency = {i: (collector.first_seen[i] - sent_at[i]) * 1000 for i in done}
    elapsed = max(collector.first_seen[i] for i in done) - t0 if done else float("inf")
    third = max(1, len(ids) // 3)
    first, last = ([latency[i] for i in part if i in latency] for part in (ids[:third], ids[-third:]))
    growing = not last or percentile(last, 0.5) > 2 * percentile(first, 0.5) + 100
    path = [collector.decisions[i] for i in done if in_path(collector.decisions[i].tier)]
    return {
        "offered_per_s": round(rate, 2),
        "published": len(ids),
        "decided": len(done),
        "decisions_per_s": round(len(done) / elapsed, 1),
        "kept_up": len(done) == len(ids) and len(done) / elapsed >= 0.9 * rate and not growing,
        "decided_in_path": len(path),
        "tiers": dict(Counter(collector.decisions[i].tier for i in done)),
        **{f"p{q}_ms": percentile([latency[d.request_id] for d in path], q / 100) for q in (50, 95, 99)},
        **latency_split(path),
    }


async def paced_run(
    bootstrap: str,
    collector: Collector,
    sent_at: dict,
    payloads: list[bytes],
    rate: float,
    processes: dict[str, int],
    in_path=lambda tier: True,
) -> dict:
    """`payloads` published at `rate`, then waited for (up to twice their publishing time, 10 s at least), with
    the cores each of `processes` (role: pid) and this one (`bench`: the publisher and reader) kept busy meanwhile
    (`cpu_cores`): a step's latency is only Jev's own where the machine had cores to spare."""
    ids = [orjson.loads(p)["request_id"] for p in payloads]
    processes = {**processes, "bench": os.getpid()}
    cpu_before = {role: cpu_seconds(pid) for role, pid in processes.items()}
    t0 = time.monotonic()
    await paced_publish(bootstrap, payloads, rate, sent_at)
    await collector.wait_for(set(ids), max(10.0, 2 * len(ids) / rate))
    elapsed = time.monotonic() - t0
    cpu_cores = {role: round((cpu_seconds(pid) - cpu_before[role]) / elapsed, 2) for role, pid in processes.items()}
    return {**paced_result(collector, sent_at, ids, t0, rate, in_path), "cpu_cores": cpu_cores}


async def sustained_capacity(probe, first: float, lo: float, hi: float | None, probes: int) -> tuple[float, list]:
    """The highest rate the pipeline keeps up with when requests arrive at that rate (not in a burst, whose larger
    micro-batches can decide more per second than steady traffic allows): `probe(rate)` runs one paced step;
    bisects between `lo` (kept up) and `hi` (did not; None: unknown, then the rate grows by half), starting at
    `first`, for `probes` steps, and on until one step kept up (three more at most)."""
    rate, tried = first, []
    for attempt in range(probes + 3):
        if attempt >= probes and lo:
            break
        step = await probe(rate)
        tried.append(step)
        log(f"sustained capacity probe at {rate:.1f}/s: {step}")
        if step["kept_up"]:
            lo = rate
            rate = (rate + hi) / 2 if hi else rate * 1.5
        else:
            hi = rate
            rate = (lo + rate) / 2 if lo else rate / 2
    return lo, tried


def half_rate(capacity: float, probes: list) -> float:
    """Half the sustained capacity; where no probe kept up (capacity 0), a quarter of the lowest rate tried."""
    return capacity / 2 if capacity else min(p["offered_per_s"] for p in probes) / 4


def half_capacity(capacity: float, probes: list, half: dict) -> dict:
    return {
        "sustained_capacity_per_s": round(capacity, 2),
        "probes": [{k: p[k] for k in ("offered_per_s", "decisions_per_s", "kept_up", "p99_ms")} for p in probes],
        **half,
    }


async def model_path_half_capacity(settings, args) -> dict:
    """The model path alone (rules and caches off): its burst capacity, then its sustained capacity (paced steps
    of --model-step-s), then its latency at half the sustained capacity."""
    from schemas.records import Control
    from streams.runtime.control import publish

    settings = settings.replace(backend=args.model_backend)
    async with Pipeline(settings, known_decision_types(), stages_process=True) as pipe:
        bootstrap = pipe.settings.bootstrap
        processes = pipe.pids()
        await publish(
            bootstrap,
            [
                Control(kind="switch", key=s, value=False, ts=time.time())
                for s in ("cache.l1", "cache.l2", "cache.l3", "score.rules")
            ],
        )
        fresh = workload.model_path_requests(args.model_burst + 20, "model")
        warm, burst = fresh[:20], fresh[20:]
        async with following_decisions(bootstrap, warm, 1e9, 300) as (collector, sent_at):
            ids = workload.request_ids(burst)
            t0 = time.monotonic()
            await paced_publish(bootstrap, burst, 1e9, sent_at)
            await collector.wait_for(ids, max(300.0, len(ids)))
            done = [i for i in ids if i in collector.first_seen]
            burst_capacity = len(done) / (max(collector.first_seen[i] for i in done) - t0)
            # fresh requests (another seed) for the paced steps: enough for every probe at twice the burst's rate
            paced = iter(
                workload.model_path_requests(
                    int(burst_capacity * 2 * args.model_step_s * (args.probes + 3) + burst_capacity * args.half_s)
                    + 100,
                    "model-paced",
                    seed=32,
                )
            )

            async def probe(rate: float, seconds: float = args.model_step_s) -> dict:
                payloads = [next(paced) for _ in range(max(10, int(rate * seconds)))]
                return await paced_run(
                    bootstrap, collector, sent_at, payloads, rate, processes, lambda tier: not rules_or_cache(tier)
                )

            capacity, probes = await sustained_capacity(probe, 0.8 * burst_capacity, 0.0, None, args.probes)
            half = await probe(half_rate(capacity, probes), args.half_s)
            result = {
                "backend": pipe.settings.backend,
                "burst_capacity_per_s": round(burst_capacity, 2),
                **half_capacity(capacity, probes, half),
            }
    return result


async def run_pipeline(settings, args) -> dict:
    base = workload.generate(int(max(args.rates) * args.step_s), seed=21)
    async with Pipeline(settings, known_decision_types(), stages_process=True) as pipe:
        bootstrap = pipe.settings.bootstrap
        processes = pipe.pids()
        warm = tagged(base[:50], "warm")
        async with following_decisions(bootstrap, warm, 1000, 120) as (collector, sent_at):
            freeze_heap()  # a full collection in this process would be read as pipeline latency
            started, steps, published, step_ids = time.monotonic(), [], set(sent_at), set()
            for rate in args.rates:
                if time.monotonic() - started > args.max_total_s:
                    break
                payloads = tagged(base[: int(rate * args.step_s)], f"rate{rate}")
                step_ids = workload.request_ids(payloads)
                published |= step_ids
                step = await paced_run(bootstrap, collector, sent_at, payloads, rate, processes)
                step["p99_rules_cache_ms"] = percentile(
                    [
                        (collector.first_seen[i] - sent_at[i]) * 1000
                        for i in step_ids
                        if i in collector.first_seen and rules_or_cache(collector.decisions[i].tier)
                    ],
                    0.99,
                )
                steps.append(step)
                log(f"rate {rate}/s: {step}")
                if not step["kept_up"] or step["p99_ms"] > args.p99_ms:
                    break
            ramp = base[: max((s["published"] for s in steps), default=len(warm))]
            cpu = dict.fromkeys(processes, 0.0)
            trials, decided = [], set()
            for trial in range(args.trials):
                burst = tagged(ramp, f"burst{trial}", args.burst)
                ids = workload.request_ids(burst)
                published |= ids
                cpu_before = {role: cpu_seconds(pid) for role, pid in processes.items()}
                t0 = time.monotonic()
                await paced_publish(bootstrap, burst, 1e9, sent_at)
                await collector.wait_for(ids, max(60.0, args.burst / 20))
                for role, pid in processes.items():
                    cpu[role] += cpu_seconds(pid) - cpu_before[role]
                done = [i for i in ids if i in collector.first_seen]
                decided.update(done)
                burst_s = max(collector.first_seen[i] for i in done) - t0 if done else float("inf")
                bare = await run_bare(pipe.settings, burst, pipe.broker.proc.pid)
                trials.append(
                    {
                        "decisions_per_s": round(len(done) / burst_s, 1),
                        **bare,
                        "ratio_to_bare": round(len(done) / burst_s / bare["bare_events_per_s"], 3),
                    }
                )
                log(f"trial {trial}: {len(done)}/{len(ids)} decided in {burst_s:.1f} s; {trials[-1]}")
            cpu_ms = {role: round(seconds * 1000 / max(len(decided), 1), 3) for role, seconds in cpu.items()}
            middle = sorted(trials, key=lambda t: t["ratio_to_bare"])[len(trials) // 2]  # the median pair
            probe_count = iter(range(1_000_000))

            async def probe(rate: float, seconds: float = args.step_s) -> dict:
                tag = f"probe{next(probe_count)}"
                payloads = tagged(ramp, tag, max(20, int(rate * seconds)))
                published.update(workload.request_ids(payloads))
                return await paced_run(bootstrap, collector, sent_at, payloads, rate, processes, rules_or_cache)

            # the search starts below the burst's rate, not from the ramp: its steps stop at --rates' last, and
            # growing by half per probe from there could never report more than 3.4 times it
            lo = max((s["offered_per_s"] for s in steps if s["kept_up"]), default=0.0)
            first = max(0.8 * middle["decisions_per_s"], 1.5 * lo) or args.rates[0]  # nothing decided: the ramp's first
            capacity, probes = await sustained_capacity(probe, first, lo, None, args.probes)
            rules_cache_half = half_capacity(capacity, probes, await probe(half_rate(capacity, probes), args.half_s))
            log(f"rules/cache path at half its sustained capacity, after the run: {rules_cache_half}")
            hops = await hop_latencies(bootstrap, step_ids)
            log(f"median hop delays (ms): {hops}")
            lag = await stage_lag(pipe.settings, [name(t) for t in ("requests", "distilled", "scored", "usage")])
            controls = [Control.loads(m.value) for m in await read_topic(bootstrap, name("control"), 0)]
            controls = [f"{c.kind} {c.key}={c.value}" for c in controls]
            log(f"control records during the run (the shadow guard's): {controls}")
    kept_up = [s for s in steps if s["kept_up"] and s["p99_ms"] <= args.p99_ms]
    tiers = dict(Counter(collector.decisions[i].tier for i in decided))
    report = {
        "decisions_per_s": middle["decisions_per_s"],
        "bare_events_per_s": middle["bare_events_per_s"],
        "ratio_to_bare": middle["ratio_to_bare"],
        "burst": args.burst,
        "trials": trials,
        "sustained_rate_per_s": rules_cache_half["sustained_capacity_per_s"],
        "p99_ms": max((s["p99_ms"] for s in kept_up), default=steps[-1]["p99_ms"] if steps else 0.0),
        "p99_rules_cache_ms": max(
            (s["p99_rules_cache_ms"] for s in kept_up), default=steps[-1]["p99_rules_cache_ms"] if steps else 0.0
        ),
        "lost": len(published - collector.decisions.keys()),
        "burst_tiers": tiers,
        "cpu_ms_per_decision": cpu_ms,
        "hop_median_ms": hops,
        "lag_after": lag,
        "steps": steps,
        "half_capacity": {"rules_cache_after_run": rules_cache_half},
        "controls": controls,
    }
    return report, ramp


async def fresh_half_capacity(settings, args, ramp: list[bytes], after_run: dict) -> dict:
    """The rules/cache path at half its sustained capacity (found by the run) again, on a fresh pipeline: its own
    broker, warmed by the ramp's requests published at once (the exact cache filled, few batches stored). The
    local broker's fetches cost more with every batch a partition ever stored (tansu, module doc), and by the
    run's half step its requests topic holds the ramp's, bursts' and probes' batches: that step measures the
    broker's age as much as the rate (`rules_cache_after_run`, kept beside this one)."""
    capacity, probes = after_run["sustained_capacity_per_s"], after_run["probes"]
    async with (
        Pipeline(settings, known_decision_types(), stages_process=True) as pipe,
        following_decisions(pipe.settings.bootstrap, tagged(ramp, "warm"), 1e9, 300) as (collector, sent_at),
    ):
        freeze_heap()
        rate = half_rate(capacity, probes)
        payloads = tagged(ramp, "half", max(20, int(rate * args.half_s)))
        half = await paced_run(pipe.settings.bootstrap, collector, sent_at, payloads, rate, pipe.pids(), rules_or_cache)
    return half_capacity(capacity, probes, half)


async def run_bare(settings, payloads: list[bytes], broker_pid: int) -> dict:
    """The bare reference in a child process (one ClickHouse directory per process), on the same broker: once it
    says it is warm, `payloads` are published from here, timed as the pipeline's burst is."""
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as f:
        f.write(b"\n".join(payloads))
    data_dir = tempfile.mkdtemp(prefix="jev-bare-")
    env = {**os.environ, "JEV_BROKER": settings.broker, "JEV_DATA_DIR": data_dir, "JEV_CLICKHOUSE_DSN": ""}
    with tempfile.TemporaryFile() as errors:  # a file, not a pipe: nobody reads stderr while the child runs
        proc = subprocess.Popen(
            [sys.executable, __file__, "--bare-child", f.name], env=env, stdout=subprocess.PIPE, stderr=errors
        )
        try:
            while (line := await asyncio.to_thread(proc.stdout.readline)) and line.strip() != b"warm":
                pass
            if line:
                t0, broker_cpu = time.monotonic(), cpu_seconds(broker_pid)
                await paced_publish(settings.bootstrap, payloads, 1e9, {}, BARE_IN)
                line = await asyncio.to_thread(proc.stdout.readline)  # printed as the last row is inserted
                broker_cpu = cpu_seconds(broker_pid) - broker_cpu
            await asyncio.to_thread(proc.communicate, timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
            os.unlink(f.name)
            shutil.rmtree(data_dir, ignore_errors=True)
        if proc.returncode or not line:
            errors.seek(0)
            raise RuntimeError(f"bare reference failed: {errors.read().decode()[-2000:]}")
    done = orjson.loads(line)
    elapsed = done["done_at"] - t0  # CLOCK_MONOTONIC: one clock for every process on this machine
    return {
        "bare_events_per_s": round(done["rows"] / elapsed, 1),
        "bare_events": done["rows"],
        "bare_s": round(elapsed, 2),
        "bare_cpu_ms_per_event": {
            "bare": round(done["cpu_s"] * 1000 / done["rows"], 3),
            "broker": round(broker_cpu * 1000 / done["rows"], 3),
        },
    }


async def bare_reference(settings, payloads: list[bytes], warm_n: int = 500) -> None:
    """count tokens → ClickHouse sink, two Faust agents, micro-batched between them as Jev's internal topics are
    (docs/architecture.md). Warms on `warm_n` of `payloads` under other ids, prints `warm`, then counts the
    len(payloads) the parent publishes; prints when the last of them was inserted, with its CPU since it was warm."""
    import faust

    from infra import clickhouse
    from infra.broker import create_topics
    from schemas.records import Request, UsageBatch
    from streams.runtime import kafka_tuning
    from streams.runtime.usage_sink import UsageSink
    from streams.text import tokens
    from streams.usage.events import usage_event

    await create_topics(settings.bootstrap, [BARE_IN, BARE_USAGE], settings.partitions)
    sink = UsageSink(clickhouse.open_migrated(settings.clickhouse))
    kafka_tuning.install()
    app = faust.App(
        "jev-bare",
        broker=settings.broker,
        store="memory://",
        web_enabled=False,
        datadir=os.path.join(settings.data_dir, "faust"),
        broker_session_timeout=6,
        broker_heartbeat_interval=1,
        consumer_auto_offset_reset="earliest",
    )
    requests = app.topic(BARE_IN, value_serializer="raw")
    usage = app.topic(BARE_USAGE, value_type=UsageBatch)
    warm = tagged(payloads[:warm_n], "bare-warm")
    inserted = {len(warm): asyncio.Event(), len(warm) + len(payloads): asyncio.Event()}

    @app.agent(requests)
    async def count_tokens(stream):
        async for raws in stream.take(1000, within=0.05):
            events = []
            for raw in raws:
                request = Request.from_data(orjson.loads(raw))
                n = tokens.count(str(request.state), settings.default_model) + sum(
                    tokens.count(c.text, settings.default_model) for c in request.candidates
                )
                events.append(usage_event(request, "ingest", model=settings.default_model, nominal_tokens=n))
            await usage.send(value=UsageBatch(events=events))

    @app.agent(usage)
    async def sink_usage(stream):
        async for batches in stream.take(5000, within=0.2):
            await asyncio.to_thread(sink.insert, [e for b in batches for e in b.events])
            for rows, event in inserted.items():
                if sink.rows >= rows:
                    event.set()

    worker = faust.Worker(
        app, loglevel="warning", loop=asyncio.get_running_loop(), daemon=False, redirect_stdouts=False, quiet=True
    )
    worker.spinner = None
    await worker.start()
    await paced_publish(settings.bootstrap, warm, 1e9, {}, BARE_IN)
    await asyncio.wait_for(inserted[len(warm)].wait(), timeout=300)
    print("warm", flush=True)
    cpu = time.process_time()  # every thread of this process
    await asyncio.wait_for(inserted[len(warm) + len(payloads)].wait(), timeout=300)
    print(
        orjson.dumps(
            {"done_at": time.monotonic(), "rows": sink.rows - len(warm), "cpu_s": time.process_time() - cpu}
        ).decode(),
        flush=True,
    )
    await worker.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="50,100,200,400", help="offered request rates per second, rising")
    p.add_argument("--step-s", type=float, default=6.0, help="seconds per rate step")
    p.add_argument("--burst", type=int, default=8000, help="requests in each saturation burst (and bare run)")
    p.add_argument(
        "--trials",
        type=int,
        default=3,
        help="burst + bare pairs, one after the other; the median pair's figures are reported",
    )
    p.add_argument(
        "--p99-ms",
        type=float,
        default=1000.0,
        help="a step whose p99 exceeds this ends the ramp (as does one that did not keep up)",
    )
    p.add_argument("--max-total-s", type=float, default=60.0, help="stop starting rate steps after this")
    p.add_argument("--backend", default="lexical", help="scoring backend (default lexical: the rules/cache path)")
    p.add_argument("--half-s", type=float, default=20.0, help="seconds of each path's run at half its capacity")
    p.add_argument("--model-burst", type=int, default=100, help="model-path requests that measure its burst capacity")
    p.add_argument("--probes", type=int, default=3, help="paced steps that bisect each path's sustained capacity")
    p.add_argument("--model-step-s", type=float, default=10.0, help="seconds of each model-path paced step")
    p.add_argument(
        "--model-backend", default="auto", help="fine tier of the model-path pipeline (auto: MiniLM when installed)"
    )
    p.add_argument("--bare-child", metavar="PAYLOADS", help=argparse.SUPPRESS)
    args = p.parse_args()
    settings = settings_mod.load()
    if args.bare_child:
        with open(args.bare_child, "rb") as f:
            payloads = f.read().split(b"\n")
        asyncio.run(bare_reference(settings, payloads))
        os._exit(0)  # chdb's threads can hold interpreter exit
    if args.trials < 1:
        p.error("--trials must be at least 1 (each trial is one burst and one bare run)")
    args.rates = [float(r) for r in args.rates.split(",")]
    settings = settings.replace(data_dir=tempfile.mkdtemp(prefix="jev-load-"), clickhouse_dsn="", backend=args.backend)
    started = time.monotonic()
    report, ramp = asyncio.run(run_pipeline(settings, args))
    half = report["half_capacity"]
    half["rules_cache"] = rules_cache = asyncio.run(
        fresh_half_capacity(settings, args, ramp, half["rules_cache_after_run"])
    )
    report["lost"] += rules_cache["published"] - rules_cache["decided"]
    log(f"rules/cache path at half its sustained capacity, on a fresh pipeline: {rules_cache}")
    half["model"] = model = asyncio.run(model_path_half_capacity(settings, args))
    log(f"model path at half capacity: {model}")
    report.update(
        p99_model_half_ms=model["p99_ms"],
        p99_rules_cache_half_ms=rules_cache["p99_ms"],
        p99_rules_cache_half_after_run_ms=half["rules_cache_after_run"]["p99_ms"],
    )
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    report["wall_s"] = round(time.monotonic() - started, 1)
    first = {
        k: report[k]
        for k in (
            "decisions_per_s",
            "bare_events_per_s",
            "ratio_to_bare",
            "p99_ms",
            "lost",
            "p99_model_half_ms",
            "p99_rules_cache_half_ms",
            "p99_rules_cache_half_after_run_ms",
        )
    }
    config = {k: v for k, v in vars(args).items() if k != "bare_child"}
    print(orjson.dumps({**first, "config": config, "load_average": os.getloadavg()[0], **report}).decode())


if __name__ == "__main__":
    main()
