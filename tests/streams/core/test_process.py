"""freeze_heap: the start-up heap leaves the collector's scans, and young collections come less often."""

import gc

import pytest

from streams.core.process import YOUNG_COLLECTION_ALLOCATIONS, freeze_heap


@pytest.fixture
def restored_collector():
    threshold = gc.get_threshold()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()


def test_start_up_objects_are_frozen_and_a_requests_worth_of_allocations_runs_no_collection(restored_collector):
    started = {"模型": ["tokenizer"], "model": ["weights"]}
    freeze_heap()
    assert gc.get_freeze_count() > 0 and not any(o is started for o in gc.get_objects())
    young = gc.get_stats()[0]["collections"]
    in_flight = [{"request_id": f"r{i}", "candidates": [i]} for i in range(YOUNG_COLLECTION_ALLOCATIONS // 4)]
    assert gc.get_stats()[0]["collections"] == young, "the default threshold (700) collects ~7 times here"
    assert len(in_flight) == YOUNG_COLLECTION_ALLOCATIONS // 4
