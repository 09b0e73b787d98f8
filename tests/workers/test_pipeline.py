"""The pipeline harness reads how long a child took to start, and each start-up phase it reported."""
import time

import orjson

from workers.pipeline import startup_phases


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
