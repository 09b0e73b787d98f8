"""`jev lag` and workers.analytics.lag on the real local broker: lag per group, topic and partition, with multi-record
batches (where tansu's ListOffsets LATEST would be wrong)."""

import uuid

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.broker import create_topics, free_port
from workers.analytics.lag import consumer_lag, export_lag, partition_lag
from workers.cli.main import main

pytestmark = pytest.mark.integration
PER_PARTITION, COMMITTED = 30, [10, 20, 30]


@pytest.fixture
async def lagging(broker):
    """A 3-partition topic with 30 records per partition, sent in multi-record batches, and a group that
    committed 10, 20 and 30 of them: lag 20, 10, 0."""
    bootstrap, topic, group = (
        broker.url.removeprefix("kafka://"),
        f"lag-{uuid.uuid4().hex[:8]}",
        f"g-{uuid.uuid4().hex[:8]}",
    )
    await create_topics(bootstrap, [topic], 3)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    await producer.start()
    try:
        for i in range(3 * PER_PARTITION):
            await producer.send(topic, b"x" * 20, partition=i % 3)
    finally:
        await producer.stop()
    view = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await view.start()
    try:
        view.assign([TopicPartition(topic, p) for p in range(3)])
        await view.commit({TopicPartition(topic, p): offset for p, offset in enumerate(COMMITTED)})
    finally:
        await view.stop()
    return bootstrap, topic, group


async def test_partition_lag_is_end_minus_committed_per_partition(lagging):
    bootstrap, topic, group = lagging
    rows = await partition_lag(bootstrap, [group])
    assert [(r["topic"], r["partition"], r["committed"], r["end"], r["lag"]) for r in rows] == [
        (topic, p, COMMITTED[p], PER_PARTITION, PER_PARTITION - COMMITTED[p]) for p in range(3)
    ]
    assert await consumer_lag(bootstrap, group, [topic], 3) == {topic: 30}


async def test_a_named_topic_shows_partitions_the_group_never_committed(lagging):
    bootstrap, topic, _ = lagging
    rows = await partition_lag(bootstrap, ["nobody-" + uuid.uuid4().hex[:6]], [topic])
    assert [(r["committed"], r["lag"]) for r in rows] == [(None, PER_PARTITION)] * 3


def test_lag_command_prints_rows_and_a_summary(lagging, monkeypatch, capsys):
    bootstrap, topic, group = lagging
    monkeypatch.setenv("JEV_BROKER", f"kafka://{bootstrap}")
    assert main(["lag", "--group", group, "--json"]) == 0
    *rows, summary = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["lag"] for r in rows] == [20, 10, 0]
    assert summary == {"groups": 1, "partitions": 3, "lag": 30, "unknown_end": 0, "by_group": {group: {topic: 30}}}
    assert main(["lag", "--group", group]) == 0
    out = capsys.readouterr()
    assert topic in out.out and group in out.out and "30 messages behind over 3 partitions of 1 groups" in out.err


def test_lag_command_names_the_broker_it_could_not_reach(monkeypatch, capsys):
    monkeypatch.setenv("JEV_BROKER", f"kafka://127.0.0.1:{free_port()}")
    assert main(["lag"]) == 2
    assert "no broker answered at 127.0.0.1:" in capsys.readouterr().err


def test_lag_help_says_what_the_figures_mean(capsys):
    with pytest.raises(SystemExit):
        main(["lag", "--help"])
    text = capsys.readouterr().out
    assert "high watermark" in text and "ListOffsets" in text and "end - committed" in text


async def test_export_lag_sets_the_prometheus_gauge_per_group_and_topic(lagging):
    from prometheus_client import REGISTRY

    bootstrap, topic, group = lagging
    assert (await export_lag(bootstrap))[(group, topic)] == 30
    assert REGISTRY.get_sample_value("jev_consumer_lag_messages", {"group": group, "topic": topic}) == 30


async def test_a_partition_whose_end_was_not_read_makes_its_topic_unknown_not_drained(monkeypatch):
    from workers.analytics import lag

    async def rows(*args):
        return [
            {"group": "g", "topic": "a", "partition": 0, "committed": 5, "end": 5, "lag": 0},
            {"group": "g", "topic": "a", "partition": 1, "committed": 5, "end": None, "lag": None},
            {"group": "g", "topic": "b", "partition": 0, "committed": 1, "end": 3, "lag": 2},
        ]

    monkeypatch.setattr(lag, "partition_lag", rows)
    assert await lag.consumer_lag("broker:9092", "g", ["a", "b"], 2) == {"a": None, "b": 2}


def test_each_stage_topic_is_read_by_the_group_of_its_consumer(settings):
    from workers.analytics import lag

    assert lag.reading_group(settings, "jev.requests.v1") == settings.ingest_group
    assert lag.reading_group(settings, "jev.usage.v1") == settings.usage_group
    assert {lag.reading_group(settings, f"jev.{t}.v1") for t in ("distilled", "scored")} == {settings.app_id}
