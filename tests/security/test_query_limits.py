"""Query limits that hold on the sandbox process itself, not only inside its engine: an answer too large to build
stops at JEV_QUERY_MEMORY_MB, one too slow to build at JEV_QUERY_TIME_S; and an admin call never waits behind
tenants' calls.
"""

from __future__ import annotations

import asyncio
import resource
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


def test_an_answer_too_large_to_build_stops_at_the_memory_limit(filled):
    limits = sandbox.Limits(time_s=60, memory_mb=1024)  # the defaults' memory; time enough to reach it
    with pytest.raises(sandbox.QueryFailed, match="stopped at JEV_QUERY_MEMORY_MB=1024"):
        sandbox.run(filled, "query", {"sql": BIG}, "t0", limits)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss << 10  # every sandbox of this process so far
    assert peak <= limits.process_bytes(), f"a sandbox grew to {peak >> 20} MB"


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
