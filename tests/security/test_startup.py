"""The stage process starts while ClickHouse is unavailable: its usage sink opens ClickHouse on first use, spills
usage durably while it cannot, and writes everything once ClickHouse is back (here: another process holds the
embedded engine's data directory, then lets it go; and a server DSN nobody answers)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from streams.usage.spill import durable_sink
from workers.analytics import sample

HOLDER = "import sys; from infra import clickhouse; c = clickhouse.open_migrated(sys.argv[1]); print('held', " \
         "flush=True); sys.stdin.read()"


def test_the_usage_sink_starts_while_clickhouse_is_unavailable_and_writes_once_it_is_back(settings, tmp_path):
    dsn = f"chdb:///{tmp_path / 'clickhouse'}"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, dsn], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert holder.stdout.readline().strip() == b"held"
    sink = durable_sink(settings.replace(clickhouse_dsn=dsn))  # used to raise here: the stage did not start
    try:
        events = sample.usage_events(20, time.time() - 60, span_s=60)
        assert sink.insert(events) == 0 and sink.pending == len(events) and sink.failures >= 1
        holder.stdin.close()
        holder.wait(timeout=30)
        assert sink.drain(timeout=60), "the spilled usage was not written once ClickHouse was back"
        rows = sink.inner.client.query("SELECT count() FROM usage_events").result_rows[0][0]
        assert rows == len(events)
    finally:
        sink.close()
        if holder.poll() is None:
            holder.kill()


def test_a_server_dsn_that_does_not_answer_spills_instead_of_failing(settings):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = durable_sink(settings.replace(clickhouse_dsn=f"http://127.0.0.1:{port}/"))
    try:
        events = sample.usage_events(5, time.time() - 60, span_s=60)
        assert sink.insert(events) == 0 and sink.pending == len(events)
    finally:
        sink.close()
