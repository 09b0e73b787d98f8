"""Faust's consumer as Jev installs it: seeks on the real local broker, and which offsets a commit covers."""
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.kafka_tuning import back_off_when_idle, committable, seek_to_committed_or_beginning
from tests.conftest import fresh_topic


async def test_a_partition_without_a_committed_offset_goes_back_to_its_beginning(broker):
    """What Faust drops at a rebalance or recovery is read again: from the committed offset where the group
    has one, from the beginning where it has none (aiokafka alone leaves that partition where it was)."""
    topic = "test.seek_to_committed"
    bootstrap = await fresh_topic(broker, topic, 2, [b"m%d" % i for i in range(20)])
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="test-seek", enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        consumer.assign(tps)
        read = 0
        while read < 20:
            read += sum(len(msgs) for msgs in (await consumer.getmany(timeout_ms=1000)).values())
        await consumer.commit({tps[0]: 4})
        assert [await consumer.position(tp) for tp in tps] == [10, 10]
        committed, next_offsets = await seek_to_committed_or_beginning(consumer)
        assert committed == {tps[0]: 4, tps[1]: None}
        assert next_offsets == {tps[0]: 4, tps[1]: 0}
        assert [await consumer.position(tp) for tp in tps] == [4, 0]
    finally:
        await consumer.stop()


async def test_an_idle_consumer_backs_its_fetch_wait_off_and_a_record_brings_it_back(broker):
    """Fetches that bring nothing double the wait up to the longest; the first fetch with records restores the
    consumer's own short wait, and every record is still delivered."""
    topic = "test.idle_backoff"
    bootstrap = await fresh_topic(broker, topic, 2, [b"m%d" % i for i in range(4)])
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                fetch_max_wait_ms=5)
    await consumer.start()
    try:
        back_off_when_idle(consumer, longest_ms=80)
        waits, read = [], 0
        while read < 4:
            read += sum(len(msgs) for msgs in (await consumer.getmany(timeout_ms=1000)).values())
        for _ in range(10):  # idle: each empty fetch doubles the wait
            await consumer.getmany(timeout_ms=100)
            waits.append(consumer._fetcher._fetch_max_wait_ms)
        assert waits == sorted(waits) and waits[-1] == 80
        await fresh_topic(broker, topic, 2, [b"late"])
        late = []
        while not late:
            late = [m.value for msgs in (await consumer.getmany(timeout_ms=1000)).values() for m in msgs]
        assert late == [b"late"]
        assert consumer._fetcher._fetch_max_wait_ms == 5
    finally:
        await consumer.stop()


@pytest.mark.parametrize("acked, start, offset, left", [
    ([3, 4, 5], 3, 6, []),  # a run from the next unhandled message: commit past it
    ([5, 3, 4, 8, 9], 3, 6, [8, 9]),  # only the first run; the rest waits for 6 and 7
    ([3], 2, None, [3]),  # 2 was never handled: Faust's check let a run start one past it
    ([4, 5], 2, None, [4, 5]),
    ([0, 1, 2], None, None, [0, 1, 2]),  # where the partition starts is unknown: commit nothing yet
    ([1, 2, 3], 2, 4, []),  # offsets below the committed one are dropped
    ([], 0, None, []),
])
def test_a_commit_covers_only_a_run_of_handled_offsets_from_the_next_unhandled_one(acked, start, offset, left):
    assert committable(acked, start) == offset
    assert acked == left


def test_the_stage_apps_consumer_commits_no_run_past_an_unhandled_offset_and_drops_nothing(settings):
    from faust.types import TP

    from streams.app import create_app

    consumer = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).consumer
    tp = TP("jev.scored.v1", 0)
    consumer._committed_offset[tp] = 2
    consumer._acked[tp], consumer._acked_index[tp] = [3], {3}
    assert consumer._new_offset(tp) is None, "offset 2 was never handled"
    consumer._acked[tp].append(2)
    consumer._acked_index[tp].add(2)
    assert consumer._new_offset(tp) == 4 and consumer._acked_index[tp] == set()
    consumer._read_offset[tp] = 9
    assert consumer._read_offset[tp] is None, "the fetch loop drops messages below a read offset it remembers"
