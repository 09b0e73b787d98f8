"""The pipeline harness reads how long a child took to start, each start-up phase it reported, and the CPU a
process used."""

import os
import time

import orjson

from workers.harness.pipeline import cpu_seconds, startup_phases


def test_startup_phases_are_seconds_from_the_spawn(tmp_path):
    spawned = time.time() - 20.0
    ready = tmp_path / "stages-1.ready"
    ready.write_bytes(orjson.dumps({"main": spawned + 2.0, "app": spawned + 10.5, "ready": spawned + 12.5}))
    assert startup_phases(ready, spawned) == {"main_s": 2.0, "app_s": 10.5, "ready_s": 12.5}


def test_an_empty_or_vanished_readiness_file_names_no_phase(tmp_path):
    ready = tmp_path / "scoring-1.ready"
    ready.touch()
    spawned = time.time() - 3.0
    assert set(startup_phases(ready, spawned)) == {"ready_s"} and startup_phases(ready, spawned)["ready_s"] >= 3.0
    ready.unlink()
    assert set(startup_phases(ready, spawned)) == {"ready_s"}  # when it was noticed, measured here


def test_cpu_seconds_counts_what_the_process_spent_not_the_time_that_passed():
    """0.3 s busy then 0.3 s asleep: /proc counts what the process's own clock counts (its other threads too)."""
    before, began = cpu_seconds(os.getpid()), time.process_time()
    while time.process_time() - began < 0.3:
        pass
    time.sleep(0.3)
    spent, expected = cpu_seconds(os.getpid()) - before, time.process_time() - began
    assert spent >= 0.25 and abs(spent - expected) <= 0.05, (spent, expected)
