"""Scale-out on the model path: decisions/s and CPU per decision with 1 and 2 scoring workers, and with 1 and 2
stage processes, side by side in one run on the same requests (rules and caches switched off).

Per configuration: the local pipeline starts, 20 warm-up requests are decided, then a burst of --burst is
published at once; decisions_per_s is the burst over the time to decide it, cpu_ms_per_decision each kind of
process's CPU from /proc (marginal_: less the idle CPU of the 5 s before). CPU per decision is the figure that
carries over between machines; --record writes the 1 × 1 figures to workers/planner/fleet_costs.json for `jev plan`.
Last stdout line: {configs: [...], scorer_speedup_2_vs_1, stage_speedup_2_vs_1, ...}.

    .venv/bin/python bench/scale.py [--burst 150] [--backend minilm] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import orjson

from schemas.records import Control
from streams import settings as settings_mod
from streams.runtime.control import publish
from workers.harness import workload
from workers.harness.chaos import Collector
from workers.harness.pipeline import Pipeline, cpu_seconds, known_decision_types

CONFIGS = [(1, 1), (1, 2), (2, 1)]  # (stage processes, scoring workers)
IDLE_S = 5.0  # the processes' idle CPU is read this long before each burst and taken off for the marginal cost
OFF = ("cache.l1", "cache.l2", "cache.l3", "score.rules")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def measure(settings, stages: int, scorers: int, burst: int) -> dict:
    async with Pipeline(settings, known_decision_types(), stages_process=True, stages=stages, scorers=scorers) as pipe:
        bootstrap = pipe.settings.bootstrap
        await publish(bootstrap, [Control(kind="switch", key=s, value=False, ts=time.time()) for s in OFF])
        collector = Collector(bootstrap)
        following = asyncio.create_task(collector.run())
        await asyncio.sleep(1.0)  # every process has read the switches
        warm = workload.model_path_requests(20, f"warm{stages}{scorers}")
        await pipe.publish(warm)
        await collector.wait_for(workload.request_ids(warm), 300)
        processes = {
            "stages": [p.pid for p in pipe.stage_procs.values()],
            "scorers": [p.pid for p in pipe.scorers.values()],
            "broker": [pipe.broker.proc.pid],
        }
        payloads = workload.model_path_requests(burst, f"burst{stages}{scorers}")
        idle_start = {role: sum(map(cpu_seconds, pids)) for role, pids in processes.items()}
        await asyncio.sleep(IDLE_S)
        before = {role: sum(map(cpu_seconds, pids)) for role, pids in processes.items()}
        idle = {role: (before[role] - idle_start[role]) / IDLE_S for role in processes}  # CPU s per s, idle
        started = time.monotonic()
        await pipe.publish(payloads)
        ids = workload.request_ids(payloads)
        await collector.wait_for(ids, max(300.0, burst))
        done = [i for i in ids if i in collector.first_seen]
        elapsed = max(collector.first_seen[i] for i in done) - started
        cpu = {role: sum(map(cpu_seconds, pids)) - before[role] for role, pids in processes.items()}
        tiers: dict[str, int] = {}
        for i in done:
            tiers[collector.decisions[i].tier] = tiers.get(collector.decisions[i].tier, 0) + 1
        candidates = sum(len(orjson.loads(p)["candidates"]) for p in payloads)
        collector.stopping.set()
        await following
    return {
        "stage_processes": stages,
        "scoring_workers": scorers,
        "decided": len(done),
        "of": len(ids),
        "decisions_per_s": round(len(done) / elapsed, 2),
        "tiers": tiers,
        "candidates_per_decision": round(candidates / len(payloads), 2),
        "cpu_ms_per_decision": {role: round(s * 1000 / max(len(done), 1), 2) for role, s in cpu.items()},
        "marginal_cpu_ms_per_decision": {
            role: round(max(0.0, s - idle[role] * elapsed) * 1000 / max(len(done), 1), 2) for role, s in cpu.items()
        },
        "idle_cpu_share": {role: round(v, 3) for role, v in idle.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=150, help="model-path requests per configuration")
    ap.add_argument("--backend", default="", help="fine tier (default: JEV_BACKEND, auto = MiniLM when installed)")
    ap.add_argument(
        "--record", action="store_true", help="write the 1 × 1 CPU figures to workers/planner/fleet_costs.json"
    )
    args = ap.parse_args()
    import tempfile

    settings = settings_mod.load().replace(data_dir=tempfile.mkdtemp(prefix="jev-scale-"), clickhouse_dsn="")
    if args.backend:
        settings = settings.replace(backend=args.backend)
    configs = []
    for stages, scorers in CONFIGS:
        result = asyncio.run(measure(settings, stages, scorers, args.burst))
        log(f"{stages} stage process(es) × {scorers} scoring worker(s): {orjson.dumps(result).decode()}")
        configs.append(result)
    rate = {(c["stage_processes"], c["scoring_workers"]): c["decisions_per_s"] for c in configs}
    summary = {
        "burst": args.burst,
        "backend": settings.backend,
        "configs": configs,
        "scorer_speedup_2_vs_1": round(rate[(1, 2)] / rate[(1, 1)], 3),
        "stage_speedup_2_vs_1": round(rate[(2, 1)] / rate[(1, 1)], 3),
    }
    if args.record:
        from workers.planner.fleet import record

        one = configs[0]
        command = f"bench/scale.py --burst {args.burst}" + (f" --backend {args.backend}" if args.backend else "")
        raw = one["cpu_ms_per_decision"]
        record(
            "stage_cpu_ms_per_model_decision",
            raw["stages"],
            "ms CPU",
            command,
            f"1 stage process at {one['decisions_per_s']} decisions/s (idle polling included: an upper bound), "
            f"rules and caches off, {settings.backend} fine tier, bundled workload, 2 shared cores",
        )
        record(
            "scorer_cpu_ms_per_candidate",
            round(raw["scorers"] / one["candidates_per_decision"], 3),
            "ms CPU",
            command,
            f"1 scoring worker, {settings.backend} fine tier, per candidate of the bundled "
            f"workload ({one['candidates_per_decision']} short candidates: scale with text length), 2 shared "
            f"cores",
        )
    print(orjson.dumps(summary).decode())


if __name__ == "__main__":
    main()
