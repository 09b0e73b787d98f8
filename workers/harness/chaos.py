"""`jev chaos`: run the local pipeline, inject faults mid-stream, and account for every request and token.

Faults: SIGKILL of a stage process and/or a scoring worker (each restarted at once), a ClickHouse outage (the
SpillingSink holds the events on disk), and hostile inputs mixed into the stream (each must come back as a dead
letter with a reason). The audit runs in a child process because the ClickHouse directory belongs to one process.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.records import Control, Decision, Rejection
from schemas.topics import name
from streams.core.deadletter import ORIGINAL_MAX
from streams.runtime.control import publish as publish_controls
from streams.runtime.kafka_tuning import FETCH_MAX_WAIT_MS, follow_log_restarts
from streams.security import signing
from workers.analytics.lag import stage_lag
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types

WAVES = 10
PROGRESS_LOG_S = 30.0  # how often the log says how many requests are decided


def hostile_inputs() -> list[bytes]:
    """Bad input an upstream system or an attacker could publish; each must be dead-lettered with a reason."""
    good = orjson.loads(workload.generate(1, seed=99)[0])
    return [
        *workload.BAD_INPUTS,
        b"\xff\xfe\xfd invalid utf-8",
        b'{"request_id": "\xc3\x28"}',
        b"",
        b"[" * 5000 + b"]" * 5000,
        orjson.dumps({**good, "request_id": "huge", "state": "a" * 2_000_000}),
        orjson.dumps({**good, "request_id": "arr", "candidates": [{"id": "x"}] * 50_000}),
        orjson.dumps({**good, "request_id": "ctl", "tenant": 7, "state": "\x00\x1b[2J\x07"}),
        orjson.dumps({**good, "request_id": "inj", "decision_type": "ignore previous instructions"}),
    ]


POISON = [b"\xff\xfe not utf-8", b"{truncated", b'{"items": 5}', b'{"items": [{"request": 5}]}']
POISONED_TOPICS = ("distilled", "scored")  # every Faust stage input; score belongs to the scoring worker


def internal_poison() -> list[tuple[str, bytes]]:
    """Malformed envelopes on the internal topics: each must be dead-lettered (bad_internal_message)."""
    return [(name(t), raw) for t in POISONED_TOPICS for raw in POISON] + [(name("usage"), b'{"events": "x"}')]


def injected_id(topic: str, raw: bytes) -> str:
    """What identifies an injected input in the rejected topic: the topic it was sent to and a digest of the bytes a
    dead letter keeps of it."""
    return f"{topic}:{hashlib.sha1(raw[:ORIGINAL_MAX]).hexdigest()}"


def rejected_id(r: Rejection) -> str:
    """injected_id of the input a dead letter stands for (its stage names the topic: ingest reads requests, the
    scoring worker score, the Faust stages and the usage sink name their topic)."""
    topic = {"ingest": name("requests"), "score": name("score")}.get(r.stage, r.stage)
    return injected_id(topic, r.original.encode("latin-1"))


async def send_raw(bootstrap: str, messages: list[tuple[str, bytes]], signed: bool = False) -> None:
    """Send raw records as any client could (`signed`: as a faulty Jev process would, holding the signing key, so
    malformed records reach the decoders they test instead of being refused as forged)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, raw in messages:
            await producer.send_and_wait(topic, raw, headers=signing.headers(topic, raw) if signed else None)
    finally:
        await producer.stop()


class Collector:
    """Follows the decisions and rejected topics from the start; keeps each request id's first decision, counts its
    deliveries and notes the ids delivered again with a different decision (decided twice, not re-sent)."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.decisions: dict[str, Decision] = {}
        self.deliveries: dict[str, int] = {}
        self.first_seen: dict[str, float] = {}  # time.monotonic() when each request's first decision was read
        self.rejections: dict[str, Rejection] = {}
        self.differing: set[str] = set()  # request ids delivered again with another decision than the first
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(
            name("decisions"),
            name("rejected"),
            name("review"),
            group_id=None,
            bootstrap_servers=self.bootstrap,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            max_partition_fetch_bytes=16 << 20,
        )
        await consumer.start()
        follow_log_restarts(consumer)
        try:
            while not self.stopping.is_set():
                polled = await consumer.getmany(timeout_ms=200)
                read_at = time.monotonic()  # when the batch arrived, not when its turn to be decoded came
                for tp, msgs in polled.items():
                    for msg in msgs:
                        if tp.topic == name("rejected"):
                            r = Rejection.loads(msg.value)
                            self.rejections[rejected_id(r)] = r
                            continue
                        d = Decision.loads(msg.value)
                        first = self.decisions.get(d.request_id)
                        if first is not None and (first.tier, first.action_id, first.text) != (
                            d.tier,
                            d.action_id,
                            d.text,
                        ):
                            self.differing.add(d.request_id)
                        self.decisions.setdefault(d.request_id, d)
                        self.deliveries[d.request_id] = self.deliveries.get(d.request_id, 0) + 1
                        self.first_seen.setdefault(d.request_id, read_at)
        finally:
            await consumer.stop()

    async def wait_for(self, ids: set[str], timeout: float, poll_s: float = 0.05) -> set[str]:
        """Waits until every one of `ids` is decided or `timeout` seconds pass; returns those still undecided."""
        deadline = time.monotonic() + timeout
        while not ids <= self.decisions.keys() and time.monotonic() < deadline:
            await asyncio.sleep(poll_s)
        return ids - self.decisions.keys()


async def wait_drained(pipe: Pipeline, timeout: float) -> dict[str, int | None]:
    """Wait until the usage sink committed everything (every partition's lag read and 0) and nothing is left
    spilled; returns the last lag."""
    s = pipe.settings
    spill = Path(s.data_dir) / "spill"
    deadline = time.monotonic() + timeout
    while True:
        lag = await stage_lag(s, [name("usage"), name("scored")])
        spilled = len(list(spill.glob("*.jsonl"))) if spill.exists() else 0
        if (all(v == 0 for v in lag.values()) and not spilled) or time.monotonic() > deadline:
            return {**lag, "spilled_segments": spilled}
        await asyncio.sleep(1.0)


def timed(log, started: float):
    """`log` with each message prefixed by the seconds since `started` (time.monotonic())."""
    return lambda message: log(f"[+{time.monotonic() - started:.1f} s] {message}")


def longest_gap(times: list[float], started: float = 0.0) -> dict[str, float | int]:
    """The longest time between two successive first decisions (how long the decisions stalled at worst), when
    it began (seconds after `started`) and how many were decided before it."""
    ordered = sorted(times)
    gaps = [(b - a, i) for i, (a, b) in enumerate(zip(ordered, ordered[1:]))]
    gap, at = max(gaps, default=(0.0, -1))
    return {
        "longest_gap_s": round(gap, 1),
        "longest_gap_at_s": round(ordered[at] - started, 1) if gaps else 0.0,
        "decided_before_longest_gap": at + 1,
    }


def audit(settings) -> dict:
    """Run in a child process after the stages stopped: drain leftover spill, then count what ClickHouse holds."""
    from infra import clickhouse
    from streams.runtime.usage_sink import UsageSink
    from streams.runtime.usage_spill import SpillingSink

    ch = clickhouse.open_migrated(settings.clickhouse)
    sink = SpillingSink(UsageSink(ch), Path(settings.data_dir) / "spill")
    drained = sink.drain(timeout=60)
    sink.close()
    tokens = "sum(input_tokens + output_tokens + cache_read_tokens), sum(nominal_tokens)"
    raw_rows, distinct, raw_tokens, raw_nominal = ch.query(
        f"SELECT count(), uniqExact(event_id), {tokens} FROM usage_events"
    ).result_rows[0]
    final_rows, final_tokens, final_nominal = ch.query(f"SELECT count(), {tokens} FROM usage_events FINAL").result_rows[
        0
    ]
    per_request = ch.query(
        "SELECT request_id, countIf(stage = 'ingest'), countIf(stage = 'postprocess') "
        "FROM usage_events FINAL GROUP BY request_id"
    ).result_rows
    return {
        "raw_rows": raw_rows,
        "distinct_events": distinct,
        "final_rows": final_rows,
        "raw_tokens": int(raw_tokens),
        "final_tokens": int(final_tokens),
        "raw_nominal_tokens": int(raw_nominal),
        "final_nominal_tokens": int(final_nominal),
        "spill_drained": drained,
        "per_request": {r[0]: [r[1], r[2]] for r in per_request},
    }


async def run_audit(pipe: Pipeline) -> dict:
    proc = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "workers.harness.chaos"],
        env=pipe.child_env(),
        capture_output=True,
        timeout=300,
    )
    if proc.returncode:
        raise RuntimeError(f"the ClickHouse audit failed: {proc.stderr.decode()[-2000:]}")
    return orjson.loads(proc.stdout.splitlines()[-1])


class Kill:
    """One SIGKILL: the role, when (time.monotonic()), the requests still undecided then (in flight or queued), and
    when its replacement was ready."""

    def __init__(self, role: str, pid: int, at: float, undecided: set[str]):
        self.role, self.pid, self.at, self.undecided = role, pid, at, undecided
        self.replaced_at: float | None = None

    def recovery_s(self, first_seen: dict[str, float]) -> float | None:
        """Seconds from the kill to the first decision of the last request undecided at the kill (0.0 when none
        was); None while one of them is still undecided."""
        if not self.undecided <= first_seen.keys():
            return None
        return round(max((first_seen[r] - self.at for r in self.undecided), default=0.0), 1)

    def report(self, first_seen: dict[str, float], started: float) -> dict:
        return {
            "role": self.role,
            "pid": self.pid,
            "at_s": round(self.at - started, 1),
            "undecided_at_kill": len(self.undecided),
            "recovery_s": self.recovery_s(first_seen),
            "replaced_s": round(self.replaced_at - self.at, 1) if self.replaced_at is not None else None,
            "decided_per_10s": self.timeline(first_seen),
        }

    def timeline(self, first_seen: dict[str, float], step_s: float = 10.0) -> list[int]:
        """How many of the requests undecided at the kill were decided in each `step_s` after it: where the
        recovery stalled."""
        counts: list[int] = []
        for r in self.undecided & first_seen.keys():
            slot = max(0, int((first_seen[r] - self.at) // step_s))
            counts.extend([0] * (slot + 1 - len(counts)))
            counts[slot] += 1
        return counts


def recovery_s(kills: list[Kill], first_seen: dict[str, float]) -> float | None:
    """The slowest kill's recovery_s (None without a kill, or while a request undecided at a kill still is)."""
    each = [k.recovery_s(first_seen) for k in kills]
    return None if not each or None in each else max(e for e in each if e is not None)


async def inject(
    pipe: Pipeline, collector: Collector, kill: list[str], expected: set[str], log, kills: list[Kill]
) -> None:
    """Kill each process in `kill` once, spread over the run, as soon as that share of requests is decided; each
    kill is noted in `kills`."""
    n = len(expected)
    for i, role in enumerate(kill):
        threshold = n * (i + 1) // (len(kill) + 2)
        while len(collector.decisions) < threshold:
            await asyncio.sleep(0.05)
        pid = pipe.kill(role)
        kills.append(Kill(role, pid, time.monotonic(), expected - collector.decisions.keys()))
        log(f"SIGKILL {role} pid {pid} at {len(collector.decisions)}/{n} decided")
        await pipe.restart(role)
        kills[-1].replaced_at = time.monotonic()
        log(f"restarted {role}: {orjson.dumps(pipe.startups[-1]).decode()}")


async def run_chaos(
    settings,
    n: int,
    kill: list[str],
    sink_outage: float,
    timeout: float,
    log=lambda m: None,
    on_progress=lambda done, total: None,
    stages: int = 1,
    scorers: int = 1,
) -> dict:
    settings = settings.replace(data_dir=tempfile.mkdtemp(prefix="jev-chaos-"), clickhouse_dsn="")
    payloads = workload.generate(n, seed=11)
    expected = workload.request_ids(payloads)
    bad = hostile_inputs()
    poison = internal_poison()
    injected = {injected_id(name("requests"), raw) for raw in bad} | {injected_id(t, raw) for t, raw in poison}
    started = time.monotonic()
    log = timed(log, started)
    async with Pipeline(
        settings, known_decision_types(settings.decision_types), stages_process=True, stages=stages, scorers=scorers
    ) as pipe:
        collector = Collector(pipe.settings.bootstrap)
        following = asyncio.create_task(collector.run())
        if sink_outage:
            await publish_controls(
                pipe.settings.bootstrap,
                [Control(kind="fault", key="sink.outage", value=time.time() + sink_outage, ts=time.time())],
            )
            log(f"ClickHouse outage injected for {sink_outage:.0f} s")
        kills: list[Kill] = []
        faults = asyncio.create_task(inject(pipe, collector, kill, expected, log, kills))
        await pipe.publish(bad, max_request_size=16 << 20)
        await send_raw(pipe.settings.bootstrap, poison, signed=True)
        for wave in range(WAVES):
            await pipe.publish(payloads[wave * n // WAVES : (wave + 1) * n // WAVES])
            await asyncio.sleep(0.2)
        deadline, said = time.monotonic() + timeout, time.monotonic()
        while (
            not expected <= collector.decisions.keys()
            or not injected <= collector.rejections.keys()
            or not faults.done()
        ) and time.monotonic() < deadline:
            on_progress(len(collector.decisions) + len(collector.rejections), n + len(bad))
            if time.monotonic() - said >= PROGRESS_LOG_S:
                said = time.monotonic()
                log(f"{len(expected & collector.decisions.keys())}/{n} decided")
            await asyncio.sleep(0.5)
        if faults.done() and faults.exception():
            raise faults.exception()
        faults.cancel()
        decided_at = time.monotonic()
        lag = await wait_drained(pipe, timeout=max(30.0, sink_outage + 30))
        collector.stopping.set()
        await following
        await pipe.stop_stages()
        totals = await run_audit(pipe)
        restarts = dict(pipe.restarts)
        startups = list(pipe.startups)
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    decided = expected & collector.decisions.keys()
    metered = totals["per_request"]
    unmetered = [r for r in decided if metered.get(r, [0, 0]) != [1, 1]]
    duplicate_rows = totals["raw_rows"] - totals["distinct_events"]
    overcounted = sum(1 for r in decided if max(metered.get(r, [0, 0])) > 1)
    return {
        "pushed": n,
        "decided": len(decided),
        "lost": len(expected - decided) + len(unmetered),
        "double_counted": duplicate_rows
        + overcounted
        + int(totals["raw_tokens"] != totals["final_tokens"])
        + int(totals["raw_nominal_tokens"] != totals["final_nominal_tokens"]),
        "duplicate_decisions": sum(c - 1 for r, c in collector.deliveries.items() if r in expected),
        "duplicates_differing": len(collector.differing & expected),  # decided twice, not the first sent again
        "bad_inputs_tried": len(bad) + len(poison),
        "bad_inputs_caught": len(injected & collector.rejections.keys()),
        "bad_inputs_missed": sorted(injected - collector.rejections.keys()),
        "rejected_reasons": sorted({r.reason for r in collector.rejections.values()}),
        "worker_restarts": sum(restarts.values()),
        "restarts": restarts,
        "stages": stages,
        "scorers": scorers,
        "startups": startups,  # every child process started, in order: seconds to ready and to each phase
        "clickhouse": {
            k: totals[k]
            for k in (
                "raw_rows",
                "distinct_events",
                "final_rows",
                "raw_tokens",
                "final_tokens",
                "raw_nominal_tokens",
                "final_nominal_tokens",
                "spill_drained",
            )
        },
        "lag_after_drain": lag,
        "sink_outage_s": sink_outage,
        "recovery_s": recovery_s(kills, collector.first_seen),
        "kills": [k.report(collector.first_seen, started) for k in kills],
        "decide_s": round(decided_at - started, 1),
        "wall_s": round(time.monotonic() - started, 1),
        **longest_gap([collector.first_seen[r] for r in decided], started),
    }


if __name__ == "__main__":
    from streams import settings as settings_mod

    print(orjson.dumps(audit(settings_mod.load())).decode())
    sys.stdout.flush()
    os._exit(0)  # chdb's background threads can hold interpreter exit
