"""SpillingSink: keeps usage events when ClickHouse cannot take them, and writes them after it recovers.

Wraps any object with `insert(events) -> int` (the UsageSink). When the inner insert raises, the events are
appended to a durable local queue: JSON-lines segment files of at most `max_memory_events` events, each
written to a temporary name, fsync'ed and renamed, so a crash never leaves half a segment. insert() then
returns, the stage commits its Kafka offsets, and memory stays bounded by one segment. A background thread
retries the oldest segment with exponential backoff and deletes it once the inner insert returned; segments
left by a crashed process are drained by the next one that opens the same directory. A segment written twice
(crash between insert and delete) is harmless: the inner sink drops event_ids it already stored.

Backpressure: past `max_spilled_events` on disk, insert() blocks (retrying) instead of spilling more, so the
stage stops consuming and Kafka holds the rest.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

import orjson

from schemas.records import UsageEvent

log = logging.getLogger("jev.usage.spill")


class SinkOutage(RuntimeError):
    """Raised by an injected fault (`jev chaos --sink-outage S`) while the outage lasts."""


class SpillQueue:
    """A directory of fsync'ed JSON-lines segments, oldest first."""

    def __init__(self, directory: Path, encode: Callable, decode: Callable):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.encode, self.decode = encode, decode
        for tmp in self.dir.glob("*.tmp"):  # a segment whose write was interrupted was never acknowledged
            tmp.unlink()
        self.seq = max((int(p.stem) for p in self.segments()), default=0)
        self.events = sum(self._count(p) for p in self.segments())

    def segments(self) -> list[Path]:
        return sorted(self.dir.glob("*.jsonl"))

    @staticmethod
    def _count(path: Path) -> int:
        with open(path, "rb") as f:
            return sum(1 for _ in f)

    def append(self, events: list) -> None:
        self.seq += 1
        final = self.dir / f"{self.seq:012d}.jsonl"
        tmp = final.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(b"".join(orjson.dumps(self.encode(e)) + b"\n" for e in events))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, final)
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.events += len(events)

    def oldest(self) -> tuple[Path, list] | None:
        segments = self.segments()
        if not segments:
            return None
        with open(segments[0], "rb") as f:
            return segments[0], [self.decode(orjson.loads(line)) for line in f if line.strip()]

    def remove(self, path: Path, n: int) -> None:
        path.unlink(missing_ok=True)
        self.events -= n


class SpillingSink:
    def __init__(self, inner, spill_dir: str | Path, max_memory_events: int = 5000,
                 max_spilled_events: int = 2_000_000, retry_initial_s: float = 0.5, retry_max_s: float = 10.0,
                 encode: Callable = lambda e: e.asdict(), decode: Callable = UsageEvent.from_data):
        self.inner = inner
        self.queue = SpillQueue(Path(spill_dir), encode, decode)
        self.max_memory_events = max_memory_events
        self.max_spilled_events = max_spilled_events
        self.retry_initial_s, self.retry_max_s = retry_initial_s, retry_max_s
        self.backoff = retry_initial_s
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.closed = threading.Event()
        self.outage_until = 0.0  # wall clock, so a restarted process re-reading the control topic agrees
        self.failures = self.spilled = self.recovered = 0
        self.drainer = threading.Thread(target=self._drain_forever, name="jev-spill-drain", daemon=True)
        self.drainer.start()
        if self.queue.events:
            log.warning("draining %d usage events spilled by an earlier process from %s",
                        self.queue.events, self.queue.dir)

    @property
    def pending(self) -> int:
        """Events spilled and not yet written."""
        return self.queue.events

    def fail_until(self, wall_time: float) -> None:
        """Inject an outage: every inner insert fails until `wall_time` (time.time())."""
        self.outage_until = wall_time

    def on_control(self, control) -> None:
        """Controls listener: a record kind=fault, key=sink.outage, value=end time injects an outage."""
        if control.kind == "fault" and control.key == "sink.outage":
            self.fail_until(float(control.value))

    def _inner_insert(self, events: list) -> int:
        if time.time() < self.outage_until:
            raise SinkOutage(f"injected ClickHouse outage for {self.outage_until - time.time():.1f} s more")
        return self.inner.insert(events)

    def insert(self, events: list) -> int:
        """Write `events`, or spill them durably when the inner sink fails; returns rows written now."""
        while True:
            with self.lock:
                if not self.queue.events:
                    try:
                        written = self._inner_insert(events)
                        self.backoff = self.retry_initial_s
                        return written
                    except Exception as exc:
                        self._failed(exc)
                if self.queue.events + len(events) <= self.max_spilled_events:
                    for i in range(0, len(events), self.max_memory_events):
                        self.queue.append(events[i:i + self.max_memory_events])
                    self.spilled += len(events)
                    self.wake.set()
                    return 0
            self.wake.set()
            time.sleep(self.backoff)  # backpressure: the spill is full, hold the stage until it drains

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        log.warning("usage sink insert failed (%s); spilling to %s, retry in %.1f s",
                    exc, self.queue.dir, self.backoff)

    def drain_once(self) -> bool:
        """Write the oldest spilled segment; True when it was written (or nothing was spilled)."""
        with self.lock:
            oldest = self.queue.oldest()
            if oldest is None:
                return True
            path, events = oldest
            try:
                self._inner_insert(events)
            except Exception as exc:
                self._failed(exc)
                self.backoff = min(self.retry_max_s, self.backoff * 2)
                return False
            self.queue.remove(path, len(events))
            self.recovered += len(events)
            self.backoff = self.retry_initial_s
            return True

    def drain(self, timeout: float) -> bool:
        """Drain every spilled segment now (retrying with backoff) until empty or `timeout`; True when empty."""
        deadline = time.monotonic() + timeout
        while self.queue.events and time.monotonic() < deadline:
            if not self.drain_once():
                time.sleep(min(self.backoff, max(0.0, deadline - time.monotonic())))
        return not self.queue.events

    def _drain_forever(self) -> None:
        while not self.closed.is_set():
            if not self.queue.events:
                self.wake.wait(1.0)
                self.wake.clear()
                continue
            delay = 0.0 if self.drain_once() else self.backoff
            if delay:
                self.closed.wait(delay)

    def close(self) -> None:
        self.closed.set()
        self.wake.set()
        self.drainer.join(5)


class LazyClient:
    """A ClickHouse client opened by `opener` on first use, and again on each use until it opens, so a process
    starts while ClickHouse is down: until it is up, every call raises and the SpillingSink holds the events."""

    def __init__(self, opener: Callable):
        self.opener, self.client, self.lock = opener, None, threading.Lock()

    def get(self):
        with self.lock:
            if self.client is None:
                self.client = self.opener()
            return self.client

    def __getattr__(self, name: str):
        return getattr(self.get(), name)


def durable_sink(settings, client=None) -> SpillingSink:
    """The production usage sink: ClickHouse (opened and migrated on first use unless `client` is given) behind
    a spill queue under data_dir/spill, so an outage, at start-up too, holds events instead of losing them."""
    from infra import clickhouse
    from streams.usage.sink import UsageSink

    client = client or LazyClient(lambda: clickhouse.open_migrated(settings.clickhouse, settings.usage_ttl_days))
    return SpillingSink(UsageSink(client), Path(settings.data_dir) / "spill")
