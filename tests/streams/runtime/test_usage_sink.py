"""The usage sink counts every event once however often it is delivered (real embedded ClickHouse)."""

import random

import orjson
import pytest

from infra.clickhouse import USAGE_COLUMNS
from schemas.records import UsageEvent
from streams.runtime.usage_sink import UsageSink, by_days, sink_messages, to_columns
from tests.conftest import consumed
from workers.analytics import levels
from workers.analytics.sample import usage_events

START = 1.79e9


def snapshot(client) -> dict:
    """Plain sums over usage_events and every aggregate: what redelivery must not move."""
    q = lambda sql: client.query(sql).result_rows  # noqa: E731
    return {
        "events": q(
            "SELECT count(), sum(input_tokens + output_tokens), sum(nominal_tokens), round(sum(cost), 9) "
            "FROM usage_events"
        ),
        "request": q(
            "SELECT request_id, sum(input_tokens) + sum(output_tokens), sumMap(tokens_by_stage), max(tier) "
            "FROM usage_by_request GROUP BY request_id ORDER BY request_id"
        ),
        "session": q(
            "SELECT session_id, uniqMerge(requests), sum(input_tokens) + sum(output_tokens) "
            "FROM usage_by_session_hour GROUP BY session_id ORDER BY session_id"
        ),
        "service": q(
            "SELECT service, stage, section, sum(events), sum(input_tokens), sum(nominal_tokens) "
            "FROM usage_by_stack_hour GROUP BY service, stage, section ORDER BY service, stage, section"
        ),
        "business": q(
            "SELECT business_event, uniqMerge(requests), sum(input_tokens) + sum(output_tokens) "
            "FROM usage_by_business_day GROUP BY business_event ORDER BY business_event"
        ),
    }


def test_to_columns_is_column_oriented_in_usage_column_order():
    events = usage_events(2, START)
    columns = to_columns(events)
    assert len(columns) == len(USAGE_COLUMNS)
    assert columns[USAGE_COLUMNS.index("event_id")] == [e.event_id for e in events]
    assert columns[USAGE_COLUMNS.index("ts")][0] == round(events[0].ts * 1000)


@pytest.mark.parametrize(
    "redeliver", ["same_batch_twice", "shuffled_other_batches", "duplicates_inside_batch", "new_sink_after_restart"]
)
def test_every_event_delivered_twice_counts_once(usage_db, redeliver):
    events = usage_events(120, START)
    once = UsageSink(usage_db)
    assert once.insert(events) == len(events)
    expected = snapshot(usage_db)
    again = list(events)
    if redeliver == "shuffled_other_batches":
        random.Random(3).shuffle(again)
    sink = UsageSink(usage_db) if redeliver == "new_sink_after_restart" else once
    if redeliver == "duplicates_inside_batch":
        inserted = sink.insert(again + again)
    else:
        inserted = sum(sink.insert(again[i : i + 97]) for i in range(0, len(again), 97))
    assert inserted == 0
    assert snapshot(usage_db) == expected
    assert expected["events"][0][0] == len(events)


def test_first_delivery_with_duplicates_inside_the_batch_keeps_one(usage_db):
    events = usage_events(10, START)
    sink = UsageSink(usage_db)
    assert sink.insert(events + events[:5]) == len(events)
    assert sink.duplicates == 5


def test_four_levels_do_not_move_under_redelivery(usage_db):
    import datetime as dt

    events = usage_events(200, START, span_s=6 * 3600)
    now = dt.datetime.fromtimestamp(START + 6 * 3600, dt.UTC)
    since = now - dt.timedelta(days=1)
    UsageSink(usage_db).insert(events)
    first = levels.four_levels(usage_db, since, now) | {"totals": levels.totals(usage_db, since)}
    UsageSink(usage_db).insert(events[::-1])
    assert levels.four_levels(usage_db, since, now) | {"totals": levels.totals(usage_db, since)} == first
    assert first["totals"]["tokens"] == sum(e.input_tokens + e.output_tokens for e in events)
    assert first["request"]["requests"] == 200


def count(client) -> int:
    return client.query("SELECT count() FROM usage_events").result_rows[0][0]


def test_an_insert_clickhouse_refuses_is_split_to_the_bad_row_and_the_rest_inserted(usage_db):
    events = usage_events(20, START)
    poison = UsageEvent.from_data({**events[7].asdict(), "event_id": "poison", "input_tokens": "abc"})
    sink = UsageSink(usage_db)
    assert sink.insert(events[:7] + [poison] + events[7:]) == len(events)
    set_aside = sink.take_set_aside()
    assert [e.event_id for e, _ in set_aside] == ["poison"] and set_aside[0][1]
    assert count(usage_db) == len(events)
    assert sink.take_set_aside() == []


def test_101_events_on_101_days_are_inserted_in_inserts_of_at_most_90_days(usage_db):
    events = [e.derive(ts=START - day * 86400) for day, e in enumerate(usage_events(101, START)[:101])]
    assert len(by_days(events)) == 2 and max(len({int(e.ts // 86400) for e in g}) for g in by_days(events)) <= 90
    assert UsageSink(usage_db).insert(events) == 101
    assert count(usage_db) == 101


def test_a_usage_batch_of_events_on_101_days_keeps_those_inside_the_window(usage_db):
    now = START + 3600
    events = [e.derive(ts=now - day * 86400 - 60) for day, e in enumerate(usage_events(101, START)[:101])]
    batch = orjson.dumps({"events": [e.asdict() for e in events]})
    rejected = sink_messages(consumed("jev.usage.v1", [batch]), UsageSink(usage_db), now, 7, 10_000)
    assert count(usage_db) == 7
    assert len(rejected) == 94 and {r.reason for r in rejected} == {"bad_usage_event"}
    assert "days old" in rejected[0].detail and "JEV_USAGE_TS_WINDOW_DAYS" in rejected[0].detail
