"""`jev up` as a user runs it: the real stack in child processes (broker, stage process with the ClickHouse engine,
scoring worker, gateway), ready when the gateway's GET /health answers 200, answering a client's decisions in
English and Chinese while it runs, and stopped cleanly by Ctrl-C (SIGINT)."""

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import orjson
import pytest

from streams.runtime.client import JevClient
from workers.cli.commands.up import READY_LINE

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started(tmp_path, *flags: str) -> tuple[subprocess.Popen, dict]:
    """`jev up --json ...flags` and what it printed before its ready line (the parts and where they listen)."""
    env = {**os.environ, "JEV_DATA_DIR": str(tmp_path / "jev"), "JEV_BACKEND": "lexical"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.cli.main", "up", "--json", "--no-model-server", *flags],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    where, deadline = {}, time.monotonic() + 300
    for line in proc.stdout:
        if line.startswith("{"):
            where = orjson.loads(line)
        if line.startswith(READY_LINE) or time.monotonic() > deadline:
            break
    assert proc.poll() is None and where, f"jev up exited ({proc.poll()}) or printed no parts before it was ready"
    return proc, where


def stopped(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(60)
    finally:
        proc.kill()


def test_jev_up_serves_the_gateway_and_kafka_clients_until_ctrl_c(tmp_path, settings):
    port = free_port()
    proc, where = started(tmp_path, "--gateway-port", str(port))
    try:
        assert where["gateway"] == f"http://127.0.0.1:{port}"
        assert httpx.get(where["gateway"] + "/health", timeout=10).status_code == 200

        async def ask():
            async with JevClient("acme", settings=settings.replace(broker=where["broker"]), timeout=120) as jev:
                return await asyncio.gather(
                    jev.decide("Where is my parcel?", ["track", "refund"], decision_type="customer_service"),
                    jev.decide("我的包裹在哪里？", ["track", "refund"], decision_type="customer_service"),
                )

        decisions = asyncio.run(ask())
        assert [d.action_id in {"track", "refund"} for d in decisions] == [True, True]
    finally:
        code = stopped(proc)
    assert code == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(where["gateway"] + "/health", timeout=5)  # nothing listens after Ctrl-C
