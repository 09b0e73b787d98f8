"""SpillingSink: keeps usage events when ClickHouse cannot take them, and writes them after it recovers.

When the inner insert raises, the events go to a durable local queue (fsync'ed JSON-lines segments, renamed into
place), so the stage can commit and memory stays bounded; a background thread retries the oldest segment with
backoff. Past `max_spilled_events` insert() blocks instead, so Kafka holds the rest. A line that does not decode,
or a row ClickHouse refuses, goes to `quarantine/` with its reason, so a segment never blocks the queue for ever.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from streams.usage.decode import usage_event

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

    def oldest(self) -> tuple[Path, list, list, int] | None:
        """The oldest segment: its path, the events that decode, (line, reason) of those that do not, and its
        line count."""
        segments = self.segments()
        if not segments:
            return None
        events, bad, lines = [], [], 0
        with open(segments[0], "rb") as f:
            for line in f:
                if not line.strip():
                    continue
                lines += 1
                try:
                    events.append(self.decode(orjson.loads(line)))
                except Exception as exc:
                    bad.append((line.rstrip(b"\n").decode("utf-8", "replace"), f"{type(exc).__name__}: {exc}"))
        return segments[0], events, bad, lines

    def remove(self, path: Path, n: int) -> None:
        path.unlink(missing_ok=True)
        self.events -= n

    def quarantine(self, source: Path, entries: list[tuple[str, str]]) -> Path:
        """Write (record as JSON text, reason) entries to quarantine/<source name>, fsync'ed; returns its path."""
        folder = self.dir / "quarantine"
        folder.mkdir(exist_ok=True)
        path = folder / source.name
        with open(path, "ab") as f:
            f.write(b"".join(orjson.dumps({"reason": reason, "record": record}) + b"\n" for record, reason in entries))
            f.flush()
            os.fsync(f.fileno())
        return path


class SpillingSink:
    def __init__(
        self,
        inner,
        spill_dir: str | Path,
        max_memory_events: int = 5000,
        max_spilled_events: int = 2_000_000,
        retry_initial_s: float = 0.5,
        retry_max_s: float = 10.0,
        encode: Callable = lambda e: e.asdict(),
        decode: Callable = usage_event,
    ):
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
        self.failures = self.spilled = self.recovered = self.quarantined = 0
        self.live_refused: list[tuple] = []
        self.drainer = threading.Thread(target=self._drain_forever, name="jev-spill-drain", daemon=True)
        self.drainer.start()
        if self.queue.events:
            log.warning(
                "draining %d usage events spilled by an earlier process from %s", self.queue.events, self.queue.dir
            )

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
                        self.queue.append(events[i : i + self.max_memory_events])
                    self.spilled += len(events)
                    self.wake.set()
                    return 0
            self.wake.set()
            time.sleep(self.backoff)  # backpressure: the spill is full, hold the stage until it drains

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        log.warning("usage sink insert failed (%s); spilling to %s, retry in %.1f s", exc, self.queue.dir, self.backoff)

    def _refused(self) -> list[tuple]:
        return self.inner.take_set_aside() if hasattr(self.inner, "take_set_aside") else []

    def take_set_aside(self) -> list[tuple]:
        """The (event, reason) pairs the inner sink refused on the live path since the last call."""
        with self.lock:
            taken, self.live_refused = self.live_refused + self._refused(), []
            return taken

    def drain_once(self) -> bool:
        """Write the oldest spilled segment, its bad lines and refused rows quarantined; True when it was written
        (or nothing was spilled)."""
        with self.lock:
            oldest = self.queue.oldest()
            if oldest is None:
                return True
            path, events, bad, lines = oldest
            self.live_refused += self._refused()  # kept apart: the live path's caller dead-letters them
            try:
                self._inner_insert(events)
            except Exception as exc:
                self._refused()  # the segment stays whole for the next try
                self._failed(exc)
                self.backoff = min(self.retry_max_s, self.backoff * 2)
                return False
            refused = self._refused()
            bad += [(orjson.dumps(self.queue.encode(e)).decode(), reason) for e, reason in refused]
            if bad:
                where = self.queue.quarantine(path, bad)
                self.quarantined += len(bad)
                log.error(
                    "%d usage records of spill segment %s set aside in %s (first: %s)",
                    len(bad),
                    path.name,
                    where,
                    bad[0][1],
                )
            self.queue.remove(path, lines)
            self.recovered += len(events) - len(refused)
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
    from streams.runtime.usage_sink import UsageSink

    client = client or LazyClient(lambda: clickhouse.open_migrated(settings.clickhouse, settings.usage_ttl_days))
    return SpillingSink(UsageSink(client), Path(settings.data_dir) / "spill")
