"""SpillingSink: a failing sink loses nothing, doubles nothing, keeps memory bounded, and recovers by itself."""

from __future__ import annotations

import time

import pytest

from schemas.records import UsageEvent
from streams.runtime.usage_spill import SinkOutage, SpillingSink


class FlakyStore:
    """An inner sink that fails while `down`, then stores events keyed by event_id (like the UsageSink)."""

    def __init__(self, down: bool = False):
        self.down = down
        self.rows: dict[str, UsageEvent] = {}
        self.writes = 0

    def insert(self, events: list) -> int:
        if self.down:
            raise ConnectionError("clickhouse: connection refused")
        self.writes += len(events)
        fresh = [e for e in events if e.event_id not in self.rows]
        self.rows.update((e.event_id, e) for e in fresh)
        return len(fresh)


def events(start: int, n: int) -> list[UsageEvent]:
    return [
        UsageEvent(
            event_id=f"r{i}:ingest",
            request_id=f"r{i}",
            ts=1.7e9 + i,
            tenant="acme",
            service="s",
            business_line="",
            session_id="",
            user_id="",
            decision_type="ranking",
            stage="ingest",
            stack="acme;s;ranking;ingest",
            input_tokens=i,
        )
        for i in range(start, start + n)
    ]


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


@pytest.fixture
def store():
    return FlakyStore()


@pytest.mark.parametrize("batches, batch_size, max_memory", [(1, 10, 100), (5, 100, 30), (20, 7, 7)])
def test_events_written_during_an_outage_arrive_once_after_recovery(tmp_path, store, batches, batch_size, max_memory):
    sink = SpillingSink(store, tmp_path, max_memory_events=max_memory, retry_initial_s=0.01, retry_max_s=0.05)
    store.down = True
    for b in range(batches):
        assert sink.insert(events(b * batch_size, batch_size)) == 0
    assert sink.pending == batches * batch_size and not store.rows
    assert all(sum(1 for _ in p.open()) <= max_memory for p in sink.queue.segments())  # memory bound per segment
    store.down = False
    assert wait_for(lambda: sink.pending == 0)
    sink.close()
    assert sorted(store.rows) == sorted(e.event_id for e in events(0, batches * batch_size))
    assert sum(e.input_tokens for e in store.rows.values()) == sum(range(batches * batch_size))


def test_new_events_queue_behind_spilled_ones_until_the_backlog_is_written(tmp_path, store):
    sink = SpillingSink(store, tmp_path, retry_initial_s=0.01)
    sink.fail_until(time.time() + 0.3)
    sink.insert(events(0, 5))
    assert sink.pending == 5
    sink.insert(events(5, 5))  # inner is up again only after the outage, so this spills too
    assert wait_for(lambda: sink.pending == 0)
    sink.close()
    assert len(store.rows) == 10


def test_a_restarted_process_drains_what_a_crashed_one_spilled(tmp_path, store):
    crashed = SpillingSink(store, tmp_path, retry_initial_s=60)
    store.down = True
    crashed.insert(events(0, 50))
    (tmp_path / "000000000099.tmp").write_bytes(b'{"half a segment')  # interrupted write: never acknowledged
    crashed.close()  # the process died: its drainer stops without having written anything
    store.down = False
    restarted = SpillingSink(store, tmp_path, retry_initial_s=0.01)
    assert restarted.drain(timeout=5)
    restarted.close()
    assert len(store.rows) == 50 and not list(tmp_path.glob("*.tmp"))


def test_a_segment_replayed_twice_is_not_double_counted(tmp_path, store):
    sink = SpillingSink(store, tmp_path, retry_initial_s=60)
    store.down = True
    sink.insert(events(0, 20))
    segment = sink.queue.segments()[0]
    copy = segment.read_bytes()
    store.down = False
    assert sink.drain(timeout=5)
    sink.close()  # the process died; a drainer still running could take the segment written back below
    segment.write_bytes(copy)  # crash after the insert, before the delete
    again = SpillingSink(store, tmp_path, retry_initial_s=0.01)
    assert again.drain(timeout=5)
    again.close()
    assert store.writes == 40 and len(store.rows) == 20


def test_a_full_spill_blocks_the_caller_instead_of_growing(tmp_path, store):
    sink = SpillingSink(store, tmp_path, max_spilled_events=10, retry_initial_s=0.05, retry_max_s=0.05)
    store.down = True
    sink.insert(events(0, 10))
    started = time.monotonic()
    import threading

    threading.Timer(0.3, lambda: setattr(store, "down", False)).start()
    sink.insert(events(10, 5))  # blocks until the backlog drained below the bound
    assert time.monotonic() - started >= 0.25
    assert wait_for(lambda: sink.pending == 0)
    sink.close()
    assert len(store.rows) == 15


def test_fault_injection_through_a_control_record(tmp_path, store):
    from schemas.records import Control

    sink = SpillingSink(store, tmp_path, retry_initial_s=0.01)
    sink.on_control(Control(kind="fault", key="sink.outage", value=time.time() + 60))
    with pytest.raises(SinkOutage):
        sink._inner_insert(events(0, 1))
    sink.on_control(Control(kind="switch", key="cache.l1", value=False))  # other controls are ignored
    sink.fail_until(0)
    assert sink.insert(events(0, 3)) == 3
    sink.close()
