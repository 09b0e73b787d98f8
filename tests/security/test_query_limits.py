"""Query limits that hold on the sandbox process itself, not only inside its engine: an answer too large to build
stops at JEV_QUERY_MEMORY_MB, one too slow to build at JEV_QUERY_TIME_S; and an admin call never waits behind
tenants' calls.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import orjson
import pytest

from streams.runtime.usage_sink import UsageSink
from tests.security.test_query_server import SLOW, post, sandboxes
from workers.analytics import sample, sandbox
from workers.analytics.owner import QueryServer, owner_file

BIG = "SELECT arrayJoin(range(100000000))"  # 800 MB in the engine, far more as Python rows


@pytest.fixture
def filled(usage_db):
    UsageSink(usage_db).insert(sample.usage_events(200, time.time() - 3600, span_s=3600))
    return usage_db


# Run in a fresh interpreter, so its children's peak memory is the sandbox's alone (this test process's children
# include the pipeline's processes, a vLLM scoring worker among them).
MEMORY_CHECK = """
import resource, sys, time
from infra import clickhouse
from streams.runtime.usage_sink import UsageSink
from workers.analytics import sample, sandbox
client = clickhouse.open_migrated(sys.argv[1])
UsageSink(client).insert(sample.usage_events(200, time.time() - 3600, span_s=3600))
limits = sandbox.Limits(time_s=60, memory_mb=1024)  # the defaults' memory; time enough to reach it
try:
    sandbox.run(client, "query", {"sql": sys.argv[2]}, "t0", limits)
except sandbox.QueryFailed as exc:
    print(exc)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10, limits.process_bytes())
"""


def test_an_answer_too_large_to_build_stops_at_the_memory_limit(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_CHECK, f"chdb:///{tmp_path / 'clickhouse'}", BIG],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    *said, figures = done.stdout.strip().splitlines()
    assert any("stopped at JEV_QUERY_MEMORY_MB=1024" in line for line in said), done.stdout
    peak, allowed = map(int, figures.split())
    assert peak <= allowed, f"a sandbox grew to {peak >> 20} MB"


def test_an_answer_too_slow_to_build_stops_at_the_time_limit(filled):
    limits = sandbox.Limits(time_s=2, memory_mb=8192)  # memory enough: time is what stops it
    started = time.monotonic()
    with pytest.raises(sandbox.QueryFailed, match="stopped at JEV_QUERY_TIME_S=2"):
        sandbox.run(filled, "query", {"sql": BIG}, "t0", limits)
    assert time.monotonic() - started < sandbox.LOAD_ALLOWANCE_S  # stopped at its own limit, not the loading one


async def test_admin_calls_never_queue_behind_tenants_calls(filled, clickhouse_dsn):
    tokens = {"tenant-a-token-0123456789": "t0", "tenant-b-token-0123456789": "t1"}
    async with QueryServer(clickhouse_dsn, tokens, limits=sandbox.Limits(time_s=300), concurrency=2):
        owner = orjson.loads(owner_file(clickhouse_dsn).read_bytes())
        endless = {"sql": SLOW + ", usage_events e"}
        tenants = [
            asyncio.create_task(asyncio.to_thread(post, owner["url"], endless, token, 60))
            for token in tokens
            for _ in range(2)
        ]  # two tokens, two calls each: every tenant thread
        deadline = time.monotonic() + 60
        while len(sandboxes()) < 4 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert len(sandboxes()) == 4, "the tenants' slow queries never all started"
        code, body = await asyncio.to_thread(post, owner["url"], {"sql": "SELECT 1"}, owner["token"])
        assert code == 200 and body["rows"] == [[1]]
        assert not any(task.done() for task in tenants), "the admin's call waited until tenants' calls ended"
        for task in tenants:  # their clients give up: their sandboxes are killed
            with pytest.raises(TimeoutError):
                await task
