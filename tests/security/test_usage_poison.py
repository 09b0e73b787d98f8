"""No usage record can stop metering (issue 31): a poisoned event is dead-lettered while the events after it are
inserted, and a spill file an older process left with a poisoned record in it drains instead of being retried for
ever (real embedded ClickHouse, the production sink: UsageSink behind its spill queue)."""

import time

import orjson
import pytest

from schemas.records import UsageEvent
from streams import settings as settings_mod
from streams.runtime.usage_sink import sink_messages
from streams.runtime.usage_spill import durable_sink
from tests.conftest import consumed
from workers.analytics.sample import usage_events


def count(client) -> int:
    return client.query("SELECT count() FROM usage_events").result_rows[0][0]


@pytest.fixture
def sink(usage_db, tmp_path):
    sink = durable_sink(settings_mod.Settings(data_dir=str(tmp_path)), client=usage_db)
    yield sink
    sink.close()


def test_the_poison_record_is_dead_lettered_while_the_next_events_are_inserted(usage_db, sink):
    now = time.time()
    before, after = usage_events(5, now - 60, span_s=10, seed=1), usage_events(5, now - 30, span_s=10, seed=2)
    after = [e.derive(event_id=f"next/{e.event_id}") for e in after]
    poison = {
        **before[0].asdict(),
        "event_id": "globex/r-poison:ingest",
        "request_id": "r-poison",
        "input_tokens": "abc",
    }
    messages = consumed(
        "jev.usage.v1",
        [
            orjson.dumps({"events": [e.asdict() for e in before] + [poison]}),
            orjson.dumps({"events": [e.asdict() for e in after]}),
        ],
    )
    rejected = sink_messages(messages, sink, now, 7, 10_000)
    assert [(r.reason, r.request_id) for r in rejected] == [("bad_usage_event", "r-poison")]
    assert "input_tokens must be an integer" in rejected[0].detail
    assert orjson.loads(rejected[0].original)["input_tokens"] == "abc"
    assert count(usage_db) == len(before) + len(after)
    assert sink.pending == 0 and sink.failures == 0
    # and the sink keeps metering what comes next
    later = [e.derive(event_id=f"later/{e.event_id}") for e in usage_events(3, now - 5, span_s=1, seed=3)]
    assert (
        sink_messages(
            consumed("jev.usage.v1", [orjson.dumps({"events": [e.asdict() for e in later]})]), sink, now, 7, 10_000
        )
        == []
    )
    assert count(usage_db) == len(before) + len(after) + len(later)


def test_an_old_poisoned_spill_file_drains_and_its_bad_records_are_quarantined(usage_db, tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    events = usage_events(10, time.time() - 3600, seed=4)
    lines = [orjson.dumps(e.asdict()) for e in events]
    lines.insert(3, orjson.dumps({**events[0].asdict(), "event_id": "poison", "input_tokens": "abc"}))
    lines.insert(6, b'{"not json')
    (spill / "000000000001.jsonl").write_bytes(b"\n".join(lines) + b"\n")  # as a crashed older process left it
    sink = durable_sink(settings_mod.Settings(data_dir=str(tmp_path)), client=usage_db)
    try:
        assert sink.drain(timeout=30)
    finally:
        sink.close()
    assert count(usage_db) == len(events)
    assert not list(spill.glob("*.jsonl"))
    quarantined = [
        orjson.loads(line) for line in (spill / "quarantine" / "000000000001.jsonl").read_bytes().splitlines()
    ]
    assert len(quarantined) == 2 and sink.quarantined == 2
    assert "input_tokens must be an integer" in quarantined[0]["reason"] and "poison" in quarantined[0]["record"]
    assert "JSONDecodeError" in quarantined[1]["reason"]


def test_a_spilled_row_clickhouse_refuses_is_quarantined_not_retried(usage_db, tmp_path):
    from streams.runtime.usage_sink import UsageSink
    from streams.runtime.usage_spill import SpillingSink

    # decoded without checks, as a spill written before them was: the insert itself must find and set it aside
    sink = SpillingSink(UsageSink(usage_db), tmp_path / "spill", decode=UsageEvent.from_data)
    events = usage_events(8, time.time() - 600, seed=5)
    poison = UsageEvent.from_data({**events[2].asdict(), "event_id": "poison", "output_tokens": "abc"})
    sink.queue.append(events[:4] + [poison] + events[4:])
    try:
        assert sink.drain(timeout=30)
    finally:
        sink.close()
    assert count(usage_db) == len(events)
    assert sink.quarantined == 1 and sink.take_set_aside() == []
    quarantined = (tmp_path / "spill" / "quarantine").glob("*.jsonl")
    assert [
        orjson.loads(line)["record"].count("poison") for f in quarantined for line in f.read_bytes().splitlines()
    ] == [1]
