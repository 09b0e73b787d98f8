"""The stage process starts while ClickHouse is unavailable: its usage sink opens ClickHouse on first use, spills
usage durably while it cannot, and writes everything once ClickHouse is back (here: another process holds the
embedded engine's data directory, then lets it go; and a server DSN nobody answers)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from streams.runtime.usage_spill import durable_sink
from workers.analytics import sample

HOLDER = (
    "import sys; from infra import clickhouse; c = clickhouse.open_migrated(sys.argv[1]); print('held', "
    "flush=True); sys.stdin.read()"
)
STAGE = """
import sys, time
from streams import settings
from streams.runtime.usage_spill import durable_sink
from workers.analytics import sample

sink = durable_sink(settings.load().replace(data_dir=sys.argv[2], clickhouse_dsn=sys.argv[1]))
events = sample.usage_events(20, time.time() - 60, span_s=60)
print("written", sink.insert(events), "pending", sink.pending, "of", len(events), "failures", sink.failures, flush=True)
sys.stdin.readline()  # ClickHouse is back
print("drained", sink.drain(timeout=60), flush=True)
print("rows", sink.inner.client.query("SELECT count() FROM usage_events").result_rows[0][0], flush=True)
sink.close()
"""


def child(code: str, *args: str) -> subprocess.Popen:
    """A separate process: the embedded engine binds one data directory per process."""
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        text=True,
    )


def test_the_usage_sink_starts_while_clickhouse_is_unavailable_and_writes_once_it_is_back(tmp_path):
    dsn = f"chdb:///{tmp_path / 'clickhouse'}"
    holder = child(HOLDER, dsn)
    stage = None
    try:
        assert holder.stdout.readline().strip() == "held"
        stage = child(STAGE, dsn, str(tmp_path / "jev"))  # durable_sink used to raise here: the stage did not start
        written = stage.stdout.readline().split()
        assert written[:2] == ["written", "0"] and written[3] == written[5] and int(written[7]) >= 1, written
        holder.stdin.close()
        holder.wait(timeout=30)
        stage.stdin.write("back\n")
        stage.stdin.flush()
        assert stage.stdout.readline().split() == ["drained", "True"]
        assert stage.stdout.readline().split() == ["rows", written[5]]
        assert stage.wait(timeout=30) == 0
    finally:
        for proc in (holder, stage):
            if proc is not None and proc.poll() is None:
                proc.kill()


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
