"""The stage process as `jev worker stream` runs it: its readiness file names when each start-up phase ended; it
stops within JEV_STOP_GRACE_S of SIGTERM, and leaves no readiness marker behind.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from infra.broker import LocalBroker

ROOT = Path(__file__).resolve().parents[3]


def test_the_stage_process_stops_soon_after_sigterm(tmp_path):
    with LocalBroker() as broker:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "JEV_BROKER": broker.url,
            "JEV_DATA_DIR": str(tmp_path),
            "JEV_BACKEND": "lexical",
            "JEV_CACHE_EMBEDDER": "hashing",
            "JEV_STOP_GRACE_S": "1",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.processes.stage_process"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        ready = tmp_path / f"stages-{proc.pid}.ready"
        deadline = time.monotonic() + 240
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the stage process did not start"
            time.sleep(0.2)
        phases = orjson.loads(ready.read_bytes())
        assert list(phases) == ["main", "app", "assigned", "recovered", "ready"]  # each phase of its start-up,
        assert sorted(phases.values()) == list(phases.values())  # in the order they happen
        time.sleep(2.0)  # running: its consumers joined, its timers ticking
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        try:
            proc.wait(timeout=15)
        finally:
            proc.kill()
        waited = time.monotonic() - sent
    assert waited < 5.0, f"stopped {waited:.1f} s after SIGTERM (grace 1 s)"
    assert not ready.exists()
