"""The demo harness: the local pipeline as one object (broker, Faust stages, scoring-worker process, ClickHouse
sink), used by `jev demo`, the integration tests, `jev chaos` and the benchmarks. The production entry of the stage
process is workers/processes/stage_process.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import faust
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client import REGISTRY, generate_latest

from infra import clickhouse
from infra.broker import LocalBroker, create_topics, die_with_parent, stop_process
from schemas.records import Chunk, Decision, Rejection
from schemas.topics import TOPICS, name
from streams.core.metrics import bearer_token, declare_known_series
from streams.runtime.app import create_app
from streams.runtime.usage_spill import durable_sink
from streams.security import signing
from workers.analytics.lag import export_lag_forever, stage_lag
from workers.analytics.owner import QueryServer
from workers.analytics.scrape import fetch


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used (all its threads), from /proc: a cost per request that a busy,
    shared machine distorts far less than a rate."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pipeline:
    """The local pipeline as a context: broker, Faust worker, scoring process, ClickHouse sink."""

    def __init__(
        self,
        settings,
        known_types: set[str],
        fresh: bool = True,
        stages_process: bool = False,
        stages: int = 1,
        scorers: int = 1,
        metrics: bool = False,
        scorer_python: str = sys.executable,
        scorer_env: dict[str, str] | None = None,
    ):
        """`stages_process`: run the Faust stages in a child process (`python -m workers.processes.stage_process`) that
        owns ClickHouse and writes through a SpillingSink, so it can be SIGKILLed and restarted; `ch` is then None.
        `stages`, `scorers`: stage processes and scoring workers. Stage processes past the first run as children
        with JEV_USAGE_SINK=0 (one process owns the embedded ClickHouse) and a data directory of their own.
        `metrics`: every child process serves /metrics on a port of its own and the in-process stages export
        consumer lag, so scrape_metrics() reads every process (as Prometheus does in docker-compose.yml).
        `scorer_python`, `scorer_env`: the interpreter and extra environment of the scoring workers (vLLM's CPU
        build runs in a venv of its own, .venv-vllm; its engine takes minutes to load on a loaded machine)."""
        if stages < 1 or scorers < 1:
            raise ValueError(
                f"a pipeline needs at least one stage process and one scoring worker "
                f"(got stages={stages}, scorers={scorers})"
            )
        self.root = Path(settings.data_dir).resolve() / "pipeline"
        self.fresh = fresh
        self.query_server = None
        if fresh and self.root.exists():
            shutil.rmtree(self.root)
        self.broker = LocalBroker(log=None)
        self.known_types = known_types
        self.base = settings
        self.stages_process = stages_process
        self.stage_count, self.scorer_count = stages, scorers
        self.stage_procs: dict[int, subprocess.Popen] = {}  # index -> process; index 0 owns ClickHouse
        self.scorers: dict[int, subprocess.Popen] = {}
        self.scorer_python, self.scorer_env = scorer_python, scorer_env or {}
        self.ch = self.app = self.worker = None
        self.restarts = {"faust": 0, "scoring": 0}
        self.startups: list[dict] = []  # per child started: {"process", "ready_s", and "<phase>_s" it reported}
        self.metrics = metrics
        self.metrics_ports: dict[subprocess.Popen, int] = {}
        self.lag_task: asyncio.Task | None = None

    @property
    def stages(self) -> subprocess.Popen | None:
        """The stage process that owns ClickHouse (None when the stages run in this process)."""
        return self.stage_procs.get(0)

    @property
    def scoring(self) -> subprocess.Popen | None:
        return self.scorers.get(0)

    def pids(self) -> dict[str, int]:
        """The first stage process, the first scoring worker and the broker, by role (the benchmarks' CPU)."""
        return {"stages": self.stages.pid, "scoring": self.scoring.pid, "broker": self.broker.proc.pid}

    async def __aenter__(self) -> Pipeline:
        self.broker.start()
        self.root.mkdir(parents=True, exist_ok=True)
        signing.configure(self.base)  # every process of the pipeline signs with this one's key (children by env)
        self.settings = self.base.replace(
            broker=self.broker.url,
            data_dir=str(self.root),
            clickhouse_dsn=self.base.clickhouse,
            signing_key_file=",".join(map(str, signing.key_files(self.base))),
            metrics_token=bearer_token(self.base) if self.metrics else "",
        )
        await create_topics(self.settings.bootstrap, [t.name for t in TOPICS.values()], self.settings.partitions)
        if self.stages_process:
            await asyncio.to_thread(self.start_stages)
            await self.start_fleet()
            return self
        self.ch = clickhouse.open_migrated(self.settings.clickhouse, self.settings.usage_ttl_days)
        if self.fresh:
            clickhouse.truncate_usage(self.ch)
        self.query_server = await QueryServer.of(self.settings).__aenter__()
        self.app = create_app(self.settings, self.known_types, sink=durable_sink(self.settings, self.ch))
        self.worker = faust.Worker(
            self.app.faust,
            loglevel=self.settings.log_level,
            loop=asyncio.get_running_loop(),
            daemon=False,
            redirect_stdouts=False,
            quiet=True,
        )
        self.worker.spinner = None  # Faust's terminal spinner writes escape codes at exit
        await self.worker.start()
        if self.metrics:
            declare_known_series()
            self.lag_task = asyncio.create_task(export_lag_forever(self.settings.bootstrap, self.settings.lag_export_s))
        await self.start_fleet()
        return self

    async def start_fleet(self) -> None:
        """The other stage processes and every scoring worker, started side by side."""
        await asyncio.gather(
            *(asyncio.to_thread(self.start_stages, i) for i in range(1, self.stage_count)),
            *(asyncio.to_thread(self.start_scoring, i) for i in range(self.scorer_count)),
        )

    def child_env(self) -> dict:
        """Every setting as its JEV_* variable, so a child process sees exactly this pipeline's settings."""
        return {
            **os.environ,
            **{f"JEV_{f.name.upper()}": str(getattr(self.settings, f.name)) for f in dataclasses.fields(self.settings)},
        }

    def spawn(
        self, module: str, ready_prefix: str, data_dir: Path | None = None, python: str = sys.executable, **env
    ) -> subprocess.Popen:
        """Start `python -m module` (settings overridden by `env`, JEV_* names) and wait for its readiness file
        (<data_dir>/<prefix>-<pid>.ready); note in `startups` how long it took (and each start-up phase the file
        names, workers.processes.stage_process.StartupPhases)."""
        data_dir = data_dir or Path(self.settings.data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        port = free_port() if self.metrics else 0
        spawned = time.time()
        proc = subprocess.Popen(
            [python, "-m", module],
            env={**self.child_env(), **env, "JEV_DATA_DIR": str(data_dir), "JEV_METRICS_PORT": str(port)},
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        if port:
            self.metrics_ports[proc] = port
        ready = data_dir / f"{ready_prefix}-{proc.pid}.ready"
        deadline = time.monotonic() + 900  # a vLLM engine loads for minutes on a loaded machine
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{module} did not start (exit code {proc.poll()}); run `python -m {module}` to see why"
                )
            time.sleep(0.1)
        self.startups.append({"process": f"{ready_prefix}-{proc.pid}", **startup_phases(ready, spawned)})
        return proc

    def start_scoring(self, index: int = 0) -> None:
        self.scorers[index] = self.spawn(
            "workers.processes.scoring_worker", "scoring", python=self.scorer_python, **self.scorer_env
        )

    def stage_dir(self, index: int) -> Path:
        return Path(self.settings.data_dir) / (f"stage{index}" if index else "")

    def start_stages(self, index: int = 0) -> None:
        """Stage process `index`; 0 owns ClickHouse (the usage sink), the others send usage by the topic only."""
        extra = {"JEV_USAGE_SINK": "0"} if index else {}
        self.stage_procs[index] = self.spawn(
            "workers.processes.stage_process", "stages", self.stage_dir(index), **extra
        )

    ROLES = {
        "faust": "the stage process that owns ClickHouse",
        "stage": "the last stage process (the owner when it runs alone)",
        "scoring": "the first scoring worker",
    }

    def target(self, role: str) -> tuple[str, int]:
        if role == "scoring":
            return "scoring", 0
        if role == "faust" or (role == "stage" and len(self.stage_procs) == 1):
            return "stages", 0
        if role == "stage":
            return "stages", max(self.stage_procs)
        raise ValueError(f"unknown role {role!r}: choose {', '.join(self.ROLES)}")

    def kill(self, role: str) -> int:
        """SIGKILL one process (see ROLES); returns its pid."""
        kind, index = self.target(role)
        proc = (self.scorers if kind == "scoring" else self.stage_procs).get(index)
        if proc is None:
            raise ValueError(
                f"no {role} process to kill (the Faust stages run in a process only with "
                f"stages_process=True, or stages > 1)"
            )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        ready_dir = Path(self.settings.data_dir) if kind == "scoring" else self.stage_dir(index)
        (ready_dir / f"{kind}-{proc.pid}.ready").unlink(missing_ok=True)
        return proc.pid

    async def restart(self, role: str) -> None:
        """Start a fresh process in place of a killed one (blocking start moved off the event loop)."""
        kind, index = self.target(role)
        await asyncio.to_thread(self.start_scoring if kind == "scoring" else self.start_stages, index)
        self.restarts[role] = self.restarts.get(role, 0) + 1

    def scrape_metrics(self) -> dict[str, str]:
        """{process: its /metrics text} of every running process of this pipeline: this one when it runs the
        stages, and each child (`<module>-<pid>`) over its own port. Needs metrics=True."""
        if not self.metrics:
            raise RuntimeError("scrape_metrics() needs Pipeline(..., metrics=True): the children serve no /metrics")
        scraped = {f"stages-{os.getpid()}": generate_latest(REGISTRY).decode()} if self.worker is not None else {}
        for proc, port in self.metrics_ports.items():
            if proc.poll() is None:
                role = "stages" if proc in self.stage_procs.values() else "scoring"
                scraped[f"{role}-{proc.pid}"] = fetch(port, token=self.settings.metrics_token)
        return scraped

    async def __aexit__(self, *exc) -> None:
        if self.lag_task is not None:
            self.lag_task.cancel()
        await asyncio.gather(*(asyncio.to_thread(stop_process, p, 10) for p in self.scorers.values()))
        await self.stop_stages()
        if self.query_server is not None:
            await self.query_server.__aexit__(*exc)
        self.broker.stop()

    async def stop_stages(self) -> None:
        """Stop the Faust stages (gracefully: the sink flushes and releases ClickHouse)."""
        await asyncio.gather(*(asyncio.to_thread(stop_process, p, 30) for i, p in self.stage_procs.items() if i))
        if self.worker is not None:
            await self.worker.stop()
            self.worker = None
        await asyncio.to_thread(stop_process, self.stages, 30)

    async def publish(self, payloads: list[bytes], max_request_size: int = 1048576) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap, linger_ms=5, max_request_size=max_request_size
        )
        await producer.start()
        try:
            for raw in payloads:
                await producer.send(name("requests"), raw)
            await producer.flush()
        finally:
            await producer.stop()

    async def ask(
        self, payloads: list[bytes], timeout: float, on_progress=None
    ) -> tuple[dict[str, Decision], list[Rejection], dict[str, list[Chunk]]]:
        """Send `payloads` as a service would, through the client library: one JevClient per tenant they name, each
        request awaited by its id (a streamed one chunk by chunk) for up to `timeout` seconds. The decisions by
        request id, the rejections (as their tenants read them: no original) and each streamed request's chunks;
        a request held for review or unanswered in time is in none of them. `on_progress(answered so far)`."""
        from streams.runtime.client import JevClient, JevError, JevRejected

        bodies = [orjson.loads(raw) for raw in payloads]
        decisions: dict[str, Decision] = {}
        rejections: list[Rejection] = []
        chunks: dict[str, list[Chunk]] = {}
        answered = [0]

        async def one(jev: JevClient, body: dict) -> None:
            rid = body["request_id"]
            try:
                if body.get("stream"):
                    fields = {k: v for k, v in body.items() if k not in ("state", "kind", "stream", "tenant")}
                    replies = jev.stream(body["state"], timeout=timeout, **fields)
                    chunks[rid] = [chunk async for chunk in replies]
                    if replies.decision is not None:  # set once the stream is exhausted
                        decisions[rid] = replies.decision
                else:
                    decisions[rid] = await jev.request(body, timeout=timeout)
            except JevRejected as exc:
                told = {"reason": exc.reason, "detail": exc.detail, "stage": "", "original": "", "request_id": rid}
                rejections.append(Rejection.from_data({**told, "ts": time.time()}))
            except JevError:  # held for review (JevHeld), or no answer in time: not decided
                pass
            answered[0] += 1
            if on_progress:
                on_progress(answered[0])

        tenants = {body["tenant"] for body in bodies}
        clients = {tenant: JevClient(tenant, settings=self.settings, service="harness") for tenant in tenants}
        await asyncio.gather(*(jev.start() for jev in clients.values()))
        try:
            await asyncio.gather(*(one(clients[body["tenant"]], body) for body in bodies))
        finally:
            await asyncio.gather(*(jev.stop() for jev in clients.values()))
        return decisions, rejections, chunks

    async def collect(
        self, expect_decided: int, expect_rejected: int, timeout: float, on_progress=None, idle: bool = False
    ):
        """Read decisions and dead letters until the expected counts arrive or `timeout` passes (with `idle`:
        passes with none arriving, nor a chunk of a streamed answer, so a slow model that keeps deciding or
        streaming is waited for: a scoring worker sends the decisions of a micro-batch's streamed answers together,
        once the last of them has ended, which on a one-slot model server takes the sum of their answers)."""
        topics = [name("decisions"), name("rejected"), *([name("chunks")] if idle else [])]
        consumer = AIOKafkaConsumer(
            *topics, bootstrap_servers=self.settings.bootstrap, auto_offset_reset="earliest", group_id=None
        )
        await consumer.start()
        decisions: dict[str, Decision] = {}
        rejections: list[Rejection] = []
        deadline = time.monotonic() + timeout
        try:
            while (
                len(decisions) < expect_decided or len(rejections) < expect_rejected
            ) and time.monotonic() < deadline:
                for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    for msg in msgs:
                        if tp.topic == name("decisions"):
                            d = Decision.loads(msg.value)
                            decisions[d.request_id] = d
                        elif tp.topic == name("rejected"):
                            rejections.append(Rejection.loads(msg.value))
                        if idle:
                            deadline = time.monotonic() + timeout
                if on_progress:
                    on_progress(len(decisions) + len(rejections))
        finally:
            await consumer.stop()
        return decisions, rejections

    async def read_chunks(self, request_ids: set[str], timeout: float) -> dict[str, list[Chunk]]:
        """The chunks on the chunk topic of `request_ids`, per request in the order they arrived, read until
        each has its final chunk or `timeout` passes (a redelivered stream repeats seq numbers: dropped)."""
        consumer = AIOKafkaConsumer(
            name("chunks"), bootstrap_servers=self.settings.bootstrap, auto_offset_reset="earliest", group_id=None
        )
        await consumer.start()
        chunks: dict[str, list[Chunk]] = {rid: [] for rid in request_ids}
        seen, finished = set(), set()
        deadline = time.monotonic() + timeout
        try:
            while finished < request_ids and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=200)).values():
                    for msg in msgs:
                        chunk = Chunk.loads(msg.value)
                        if chunk.request_id in chunks and (chunk.request_id, chunk.seq) not in seen:
                            seen.add((chunk.request_id, chunk.seq))
                            chunks[chunk.request_id].append(chunk)
                            if chunk.final:
                                finished.add(chunk.request_id)
        finally:
            await consumer.stop()
        return chunks

    async def wait_usage_rows(self, at_least: int, timeout: float = 30.0) -> int:
        """Rows land in ClickHouse shortly after decisions: wait for `at_least`, then until the usage sink has
        committed everything on the usage topic (it commits only what it inserted). Waiting for the count to stop
        growing read too early once the sink gathered a second of usage per insert."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.usage_rows() >= at_least and (await stage_lag(self.settings, [name("usage")]))[name("usage")] == 0:
                break
            await asyncio.sleep(0.5)
        return self.usage_rows()

    def usage_rows(self) -> int:
        if self.ch is None:
            raise RuntimeError(
                "ClickHouse belongs to the stage process (stages_process=True); "
                "query it after stop_stages() from a process that opens settings.clickhouse"
            )
        return int(self.ch.query("SELECT count() FROM usage_events FINAL").result_rows[0][0])


def startup_phases(ready: Path, spawned: float) -> dict[str, float]:
    """Seconds from `spawned` (wall clock) to readiness (now, unless the file names its `ready` time) and to each
    phase the readiness file names (a JSON object of phase -> wall-clock time; an empty file names none)."""
    try:
        phases = orjson.loads(ready.read_bytes() or b"{}")
    except (OSError, orjson.JSONDecodeError):  # removed by a stop, or not a stage process's file
        phases = {}
    return {
        "ready_s": round(time.time() - spawned, 1),
        **{f"{phase}_s": round(at - spawned, 1) for phase, at in phases.items()},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def known_decision_types(path: str = "") -> set[str]:
    """The decision types ingest admits: those of the scoring engine's configuration (JEV_DECISION_TYPES)."""
    from streams.scoring.factory import known_decision_types as configured

    return configured(path)
