"""usage sink: UsageBatch envelopes → column inserts into ClickHouse, off the event loop.

Rows are deduplicated by event_id (ReplacingMergeTree), so redelivery after a crash never
double-counts; offsets advance only after the insert returned.
"""
from __future__ import annotations

import asyncio
import datetime as dt

from infra.clickhouse import USAGE_COLUMNS

UTC = dt.timezone.utc


def to_columns(events: list) -> list[list]:
    """Column-oriented data for clickhouse-connect (the fast insert path)."""
    columns = [[getattr(e, name) for e in events] for name in USAGE_COLUMNS]
    ts = USAGE_COLUMNS.index("ts")
    columns[ts] = [dt.datetime.fromtimestamp(t, UTC) for t in columns[ts]]
    return columns


class UsageSink:
    def __init__(self, client):
        self.client = client
        self.rows = 0

    def insert(self, events: list) -> None:
        if events:
            self.client.insert("usage_events", to_columns(events), column_names=USAGE_COLUMNS,
                               column_oriented=True)
            self.rows += len(events)


def register(app, topics, settings, sink_ref) -> None:
    @app.agent(topics.usage, name="sink_usage")
    async def sink_usage(stream):
        async for batches in stream.take(settings.sink_batch_max, within=settings.sink_flush_ms / 1000):
            events = [e for batch in batches for e in batch.events]
            await asyncio.to_thread(sink_ref().insert, events)
