"""The local pipeline as one object: broker, Faust stages, scoring-worker process, ClickHouse sink.

Used by `jev demo`, the integration tests, `jev chaos` and the benchmarks.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import faust
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from infra import clickhouse
from infra.broker import LocalBroker, create_topics
from schemas.records import Decision, Rejection
from schemas.topics import TOPICS, name
from streams.app import create_app
from streams.usage.sink import UsageSink


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


class Pipeline:
    """The local pipeline as a context: broker, Faust worker, scoring process, ClickHouse sink."""

    def __init__(self, settings, known_types: set[str], fresh: bool = True):
        self.root = Path(settings.data_dir).resolve() / "pipeline"
        if fresh and self.root.exists():
            shutil.rmtree(self.root)
        self.broker = LocalBroker(log=None)
        self.known_types = known_types
        self.base = settings
        self.scoring: subprocess.Popen | None = None

    async def __aenter__(self) -> "Pipeline":
        self.broker.start()
        self.settings = self.base.replace(broker=self.broker.url, data_dir=str(self.root),
                                          clickhouse_dsn=f"chdb:///{self.root / 'clickhouse'}")
        await create_topics(self.settings.bootstrap, [t.name for t in TOPICS.values()], self.settings.partitions)
        self.ch = clickhouse.open_migrated(self.settings.clickhouse)
        self.app = create_app(self.settings, self.known_types, sink=UsageSink(self.ch))
        self.worker = faust.Worker(self.app, loglevel=self.settings.log_level, loop=asyncio.get_running_loop(),
                                   daemon=False, redirect_stdouts=False, quiet=True)
        self.worker.spinner = None  # Faust's terminal spinner writes escape codes at exit
        await self.worker.start()
        self.start_scoring()
        return self

    def start_scoring(self) -> None:
        env = {**os.environ, "JEV_BROKER": self.settings.broker, "JEV_DATA_DIR": self.settings.data_dir,
               "JEV_BACKEND": self.settings.backend, "JEV_APP_ID": self.settings.app_id}
        self.scoring = subprocess.Popen([sys.executable, "-m", "workers.scoring.worker"], env=env,
                                        stdin=subprocess.DEVNULL)
        ready = Path(self.settings.data_dir) / f"scoring-{self.scoring.pid}.ready"
        deadline = time.monotonic() + 300
        while not ready.exists():
            if self.scoring.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the scoring worker did not start (exit code {self.scoring.poll()}); "
                                   f"run `python -m workers.scoring.worker` to see why")
            time.sleep(0.1)

    async def __aexit__(self, *exc) -> None:
        if self.scoring and self.scoring.poll() is None:
            self.scoring.terminate()
            try:
                self.scoring.wait(10)
            except subprocess.TimeoutExpired:
                self.scoring.kill()
        await self.worker.stop()
        self.broker.stop()

    async def publish(self, payloads: list[bytes]) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.settings.bootstrap, linger_ms=5)
        await producer.start()
        try:
            for raw in payloads:
                await producer.send(name("requests"), raw)
            await producer.flush()
        finally:
            await producer.stop()

    async def collect(self, expect_decided: int, expect_rejected: int, timeout: float, on_progress=None):
        """Read decisions and dead letters until the expected counts arrive or `timeout` passes."""
        consumer = AIOKafkaConsumer(name("decisions"), name("rejected"), bootstrap_servers=self.settings.bootstrap,
                                    auto_offset_reset="earliest", group_id=None)
        await consumer.start()
        decisions: dict[str, Decision] = {}
        rejections: list[Rejection] = []
        deadline = time.monotonic() + timeout
        try:
            while (len(decisions) < expect_decided or len(rejections) < expect_rejected) \
                    and time.monotonic() < deadline:
                for tp, msgs in (await consumer.getmany(timeout_ms=200)).items():
                    for msg in msgs:
                        if tp.topic == name("decisions"):
                            d = Decision.loads(msg.value)
                            decisions[d.request_id] = d
                        else:
                            rejections.append(Rejection.loads(msg.value))
                if on_progress:
                    on_progress(len(decisions) + len(rejections))
        finally:
            await consumer.stop()
        return decisions, rejections

    async def wait_usage_rows(self, at_least: int, timeout: float = 30.0) -> int:
        """Rows land in ClickHouse shortly after decisions; wait for `at_least`, then until they stop arriving."""
        deadline, last = time.monotonic() + timeout, -1
        while time.monotonic() < deadline:
            rows = self.usage_rows()
            if rows >= at_least and rows == last:
                return rows
            last = rows
            await asyncio.sleep(1.0)
        return self.usage_rows()

    def usage_rows(self) -> int:
        return int(self.ch.query("SELECT count() FROM usage_events FINAL").result_rows[0][0])


def known_decision_types() -> set[str]:
    from workers.scoring import engine

    return set(getattr(engine, "known_decision_types", lambda: {"inventory_transfer", "risk_interception",
                                                                 "ranking", "customer_service"})())
