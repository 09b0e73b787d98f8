"""usage sink: UsageBatch envelopes → column inserts into ClickHouse, off the event loop.

Its BatchConsumer commits a micro-batch only after the insert returned; exactly once on top of that: events whose
event_id is in the batch already or in usage_event_ids (the last 2 days) are dropped first. No record can poison
it: each event is checked at decode (streams/usage/decode.py) and a bad one dead-lettered; an insert spans a
bounded number of days; an insert ClickHouse refuses is split until the refused rows are found and set aside.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
from collections.abc import Callable
from itertools import groupby
from typing import Protocol

import faust
import orjson

from infra.clickhouse import USAGE_COLUMNS
from schemas.records import UsageBatch
from streams.core import metrics
from streams.core.deadletter import dead_letter, forged, undecodable
from streams.core.outbox import Delivers, Outbox
from streams.runtime.consumer import BatchConsumer, serve
from streams.runtime.topics import Topics
from streams.security import signing
from streams.settings import Settings
from streams.usage.decode import BadUsage, usage_event

TS = USAGE_COLUMNS.index("ts")
ROW = operator.itemgetter(*USAGE_COLUMNS)  # a UsageEvent's fields, in column order
# the batch's ids go into a session-local Memory table: a native insert + `IN table` is ~3x faster than
# binding thousands of ids into the query text
PROBE = "CREATE TEMPORARY TABLE IF NOT EXISTS usage_probe (event_id String) ENGINE = Memory"
STORED_IDS = "SELECT event_id FROM usage_event_ids WHERE event_id IN usage_probe"
MAX_PARTITIONS = 90  # days (partitions of usage_events) per insert, under ClickHouse's limit of 100
# No merging of an inserted block's rows by sorting key at insert time: the sink drops an insert's repeated
# event_ids itself and each materialized view's GROUP BY is its table's sorting key, so that merge found nothing
# and cost 13-22% of the insert's CPU (7,332 rows, chdb, interleaved: 153/87/74 → 132/68/62 ms). Reads merge with
# FINAL / GROUP BY as before.
INSERT_SETTINGS = {"optimize_on_insert": 0}
DAY = 86400


def to_columns(events: list) -> list[list]:
    """Column-oriented data for clickhouse-connect (the fast insert path); ts as DateTime64(3) ticks (ms).
    Reads each Record's __dict__ (several times faster than its field descriptors) into a row tuple with one C call
    (ROW) and transposes the rows with zip: a third of the time of a Python loop per column."""
    if not events:
        return [[] for _ in USAGE_COLUMNS]
    columns = [list(column) for column in zip(*map(ROW, [e.__dict__ for e in events]))]
    columns[TS] = [round(t * 1000) for t in columns[TS]]
    return columns


def by_days(events: list, max_days: int = MAX_PARTITIONS) -> list[list]:
    """The events in groups spanning at most `max_days` UTC days each (in ts order when they span more)."""
    if len({int(e.ts // DAY) for e in events}) <= max_days:
        return [events] if events else []
    days = [list(day) for _, day in groupby(sorted(events, key=lambda e: e.ts), key=lambda e: int(e.ts // DAY))]
    return [[e for day in days[i : i + max_days] for e in day] for i in range(0, len(days), max_days)]


class Sink(Protocol):
    """Where the usage agent writes: a UsageSink, or the SpillingSink around one (streams.runtime.usage_spill)."""

    def insert(self, events: list) -> int: ...

    def take_set_aside(self) -> list[tuple]: ...


class UsageSink:
    def __init__(self, client):
        self.client = client
        self.rows = 0
        self.duplicates = 0
        self.lock = threading.Lock()
        self.probe_ready = False
        self.set_aside: list[tuple] = []  # (event, ClickHouse's reason) of rows an insert refused
        self.contexts: dict = {}  # table → clickhouse-connect InsertContext, its column types asked once

    def new_events(self, events: list) -> list:
        """The events not seen before: first of each event_id in the batch, and not already stored."""
        unique = list({e.event_id: e for e in reversed(events)}.values())[::-1]
        if not unique:
            return unique
        with self.lock:
            if not self.probe_ready:
                self.client.command(PROBE)
                self.probe_ready = True
            self.client.command("TRUNCATE TABLE usage_probe")
            self.insert_columns("usage_probe", [[e.event_id for e in unique]], ["event_id"])
            stored = {row[0] for row in self.client.query(STORED_IDS).result_rows}
        return [e for e in unique if e.event_id not in stored] if stored else unique

    def insert(self, events: list) -> int:
        """Insert the events not stored yet; returns how many rows were inserted. Rows ClickHouse refuses while
        it answers are set aside (take_set_aside); an outage (ClickHouse does not answer) raises."""
        started = time.perf_counter()
        fresh = self.new_events(events)
        inserted = [e for group in by_days(fresh) for e in self._insert_or_split(group)]
        self.rows += len(inserted)
        self.duplicates += len(events) - len(fresh)
        metrics.observe_sink(inserted, len(events) - len(fresh), time.perf_counter() - started)
        return len(inserted)

    def _insert_or_split(self, events: list) -> list:
        """The events inserted: all of them, or, when ClickHouse refuses the insert, each half's, recursively,
        down to the single rows it refuses."""
        try:
            with self.lock:
                self.insert_columns("usage_events", to_columns(events), USAGE_COLUMNS, INSERT_SETTINGS)
            return events
        except Exception as exc:
            if not self.answers():
                raise
            if len(events) > 1:
                half = len(events) // 2
                return self._insert_or_split(events[:half]) + self._insert_or_split(events[half:])
            self.set_aside.append((events[0], f"{type(exc).__name__}: {str(exc)[:500]}"))
            return []

    def insert_columns(self, table: str, columns: list[list], names: list[str], settings: dict | None = None) -> None:
        """A column-oriented insert into `table` through an insert context kept per table: clickhouse-connect asks a
        table's column types (DESCRIBE) before every insert made without one (1.5-2.5% of the stage process's
        samples at saturation, py-spy). Under self.lock."""
        context = self.contexts.get(table)
        if context is None:
            context = self.contexts[table] = self.client.create_insert_context(
                table, names, column_oriented=True, settings=settings
            )
        context.data = columns
        self.client.insert(context=context)

    def answers(self) -> bool:
        """Whether ClickHouse answers a trivial query (an insert failing then is the rows' fault, not an outage)."""
        try:
            self.client.command("SELECT 1")
            return True
        except Exception:
            return False

    def take_set_aside(self) -> list[tuple]:
        """The (event, reason) pairs of rows refused since the last call."""
        taken, self.set_aside = self.set_aside, []
        return taken


def refused(event, reason: str):
    """The dead letter of a usage row ClickHouse refused."""
    return dead_letter(
        "usage_insert_refused",
        f"ClickHouse refused this usage row: {reason}",
        "usage",
        orjson.dumps(event.to_representation()),
        request_id=event.request_id,
    )


def read_envelopes(messages: list, now: float | None = None, window_days: int = 7) -> tuple[list, list]:
    """The usage events of a micro-batch of UsageBatch messages, each checked (decode.usage_event); a dead letter
    for each message Jev did not write (streams.security.signing: unsigned or badly signed, counted as forged), each
    that is not a UsageBatch and each event that fails its check (the rest go on)."""
    events, rejected = [], []
    for message in messages:
        reason = signing.check(message)
        if reason:
            rejected.append(forged(message, reason))
            continue
        try:
            batch = orjson.loads(message.value)
            items = batch.get("events") if isinstance(batch, dict) else None
            if not isinstance(items, list):
                raise TypeError(f"{UsageBatch.__name__}.events must be a list")
        except Exception as exc:  # anything that is not a UsageBatch, however malformed
            rejected.append(undecodable(message, exc))
            continue
        for i, item in enumerate(items):
            try:
                events.append(usage_event(item, now, window_days))
            except BadUsage as exc:
                request_id = item.get("request_id") if isinstance(item, dict) else ""
                rejected.append(
                    dead_letter(
                        "bad_usage_event",
                        f"{message.topic}[{message.partition}]@{message.offset} event {i}: {exc}",
                        "usage",
                        orjson.dumps(item),
                        request_id=request_id if isinstance(request_id, str) else "",
                    )
                )
    return events, rejected


def sink_messages(messages: list, sink: Sink, now: float, window_days: int, batch_max: int) -> list:
    """One micro-batch of usage messages: its checked events inserted (or spilled) `batch_max` at a time; returns
    its dead letters: messages and events that fail their checks, rows ClickHouse refused."""
    events, rejected = read_envelopes(messages, now, window_days)
    for i in range(0, len(events), batch_max):
        sink.insert(events[i : i + batch_max])
    return rejected + [refused(event, reason) for event, reason in sink.take_set_aside()]


def register(
    app: faust.App, topics: Topics, settings: Settings, sink_ref: Callable[[], Sink], sender: Delivers
) -> BatchConsumer:
    async def sink_usage(messages: list) -> Outbox:
        """One micro-batch: inserted, or spilled to disk; its dead letters returned, delivered before its offsets
        are committed."""
        # in a thread: decoding and inserting thousands of events at once on the event loop would hold every
        # other stage of this process for tens of ms (the GIL is handed over every few ms instead)
        rejected = await asyncio.to_thread(
            sink_messages, messages, sink_ref(), time.time(), settings.usage_ts_window_days, settings.sink_batch_max
        )
        return Outbox(dead_letters=rejected)

    return serve(
        app,
        BatchConsumer(
            settings.bootstrap,
            topics.usage.get_topic_name(),
            settings.usage_group,
            sink_usage,
            settings.sink_batch_max,
            settings.sink_flush_ms,
            sender=sender,
            linger_ms=settings.sink_flush_ms,
        ),
    )
