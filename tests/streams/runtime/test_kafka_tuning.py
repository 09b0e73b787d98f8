"""Faust's consumer as Jev installs it: seeks on the real local broker, and which offsets a commit covers."""

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from infra.broker import LocalBroker, create_topics
from streams.core.metrics import LOG_RESTARTS
from streams.runtime.kafka_tuning import (
    back_off_when_idle,
    committable,
    follow_log_restarts,
    forget_old_log,
    seek_to_committed_or_beginning,
)
from tests.conftest import fresh_topic


async def test_a_partition_without_a_committed_offset_goes_back_to_its_beginning(broker):
    """What Faust drops at a rebalance or recovery is read again: from the committed offset where the group
    has one, from the beginning where it has none (aiokafka alone leaves that partition where it was)."""
    topic = "test.seek_to_committed"
    bootstrap = await fresh_topic(broker, topic, 2, [b"m%d" % i for i in range(20)])
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id="test-seek", enable_auto_commit=False, auto_offset_reset="earliest"
    )
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
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", fetch_max_wait_ms=5
    )
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


async def send(producer: AIOKafkaProducer, topic: str, prefix: bytes, n: int) -> None:
    for i in range(n):
        await producer.send_and_wait(topic, prefix + b"%d" % i, partition=0)


async def read(consumer: AIOKafkaConsumer, n: int) -> list[bytes]:
    """The values of the next `n` records the consumer delivers (fewer if 10 s pass first)."""
    values = []
    for _ in range(50):
        values += [m.value for msgs in (await consumer.getmany(timeout_ms=200)).values() for m in msgs]
        if len(values) >= n:
            break
    return values


async def test_a_consumer_reads_a_restarted_brokers_log_from_its_beginning():
    """tansu restarted without its data answers a fetch past its new end with no records and no error: the
    consumer would skip everything up to its old position. With follow_log_restarts it reads the new log from its
    first record, counts the partition and says so to `on_restart`."""
    topic = "test.log_restart"
    with LocalBroker() as broker:
        bootstrap = broker.url.removeprefix("kafka://")
        await create_topics(bootstrap, [topic], 1)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", fetch_max_wait_ms=20
        )
        await producer.start()
        await consumer.start()
        restarted = []
        follow_log_restarts(consumer, restarted.append)
        before = LOG_RESTARTS.labels(topic)._value.get()
        try:
            await send(producer, topic, b"old", 10)
            assert len(await read(consumer, 10)) == 10
            broker.stop()
            broker.start()
            await create_topics(bootstrap, [topic], 1)
            await send(producer, topic, b"new", 3)
            assert await read(consumer, 3) == [b"new0", b"new1", b"new2"]
            assert restarted == [TopicPartition(topic, 0)]
            assert LOG_RESTARTS.labels(topic)._value.get() == before + 1
        finally:
            await consumer.stop()
            await producer.stop()


async def test_a_restarted_log_that_grew_past_the_old_position_is_still_read_from_its_beginning():
    """The race the high watermark alone loses: the restarted broker's new log already reaches past the consumer's
    old position when it fetches again, so the fetch returns records and no sign of a shorter log. The new cluster
    id, asked before fetching over the new connection, still sends the consumer back to the first record."""
    topic = "test.log_restart_race"
    with LocalBroker() as broker:
        bootstrap = broker.url.removeprefix("kafka://")
        await create_topics(bootstrap, [topic], 1)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", fetch_max_wait_ms=20
        )
        tp = TopicPartition(topic, 0)
        await producer.start()
        await consumer.start()
        consumer.assign([tp])
        restarted = []
        follow_log_restarts(consumer, restarted.append)
        try:
            await send(producer, topic, b"old", 5)
            assert len(await read(consumer, 5)) == 5
            consumer.pause(tp)
            broker.stop()
            broker.start()
            await create_topics(bootstrap, [topic], 1)
            await send(producer, topic, b"new", 8)
            consumer.resume(tp)
            assert await read(consumer, 8) == [b"new%d" % i for i in range(8)]
            assert restarted == [tp]
        finally:
            await consumer.stop()
            await producer.stop()


async def test_a_fetch_over_a_new_connection_waits_for_a_metadata_update_a_broker_answered():
    """The broker comes back between a metadata request that no broker answered and the fetch after it: that fetch
    would open its own connection to the new broker, unchecked, and read the new log at the old position. It is
    not sent until an update has reached a broker (and so told its cluster id)."""
    answers, fetched = [False, True], []

    async def fetch(assignment, node_id, request):
        fetched.append(node_id)
        return True

    def update():
        done = asyncio.get_running_loop().create_future()
        done.set_result(answers.pop(0))
        return done

    inactive = SimpleNamespace(active=False)
    client = SimpleNamespace(
        _conns={}, force_metadata_update=update, cluster=SimpleNamespace(update_metadata=lambda metadata: None)
    )
    consumer = SimpleNamespace(
        _client=client,
        _subscription=SimpleNamespace(subscription=None),
        _fetcher=SimpleNamespace(_proc_fetch_request=fetch, _retry_backoff=0),
    )
    follow_log_restarts(consumer)
    assert await consumer._fetcher._proc_fetch_request(inactive, 111, None) is False
    assert fetched == []
    assert await consumer._fetcher._proc_fetch_request(inactive, 111, None) is True
    assert fetched == [111] and answers == []


@pytest.mark.parametrize(
    "acked, start, offset, left",
    [
        ([3, 4, 5], 3, 6, []),  # a run from the next unhandled message: commit past it
        ([5, 3, 4, 8, 9], 3, 6, [8, 9]),  # only the first run; the rest waits for 6 and 7
        ([3], 2, None, [3]),  # 2 was never handled: Faust's check let a run start one past it
        ([4, 5], 2, None, [4, 5]),
        ([0, 1, 2], None, None, [0, 1, 2]),  # where the partition starts is unknown: commit nothing yet
        ([1, 2, 3], 2, 4, []),  # offsets below the committed one are dropped
        ([], 0, None, []),
    ],
)
def test_a_commit_covers_only_a_run_of_handled_offsets_from_the_next_unhandled_one(acked, start, offset, left):
    assert committable(acked, start) == offset
    assert acked == left


def test_the_stage_apps_consumer_commits_no_run_past_an_unhandled_offset_and_drops_nothing(settings):
    from faust.types import TP

    from streams.runtime.app import create_app

    consumer = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).faust.consumer
    tp = TP("jev.scored.v1", 0)
    consumer._committed_offset[tp] = 2
    consumer._acked[tp], consumer._acked_index[tp] = [3], {3}
    assert consumer._new_offset(tp) is None, "offset 2 was never handled"
    consumer._acked[tp].append(2)
    consumer._acked_index[tp].add(2)
    assert consumer._new_offset(tp) == 4 and consumer._acked_index[tp] == set()
    consumer._read_offset[tp] = 9
    assert consumer._read_offset[tp] is None, "the fetch loop drops messages below a read offset it remembers"


def test_the_stage_apps_consumer_commits_a_restarted_log_from_its_first_offset(settings):
    """The broker lost the partition's log: the new log's handled offsets 0-4 sit below the old committed offset
    7, and an old acknowledged offset 9 could join their run. Forgotten, the new log commits from 0."""
    from faust.types import TP

    from streams.runtime.app import create_app

    consumer = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).faust.consumer
    tp, other = TP("jev.scored.v1", 0), TP("jev.scored.v1", 1)
    consumer._committed_offset.update({tp: 7, other: 3})
    consumer._acked[tp], consumer._acked_index[tp] = [9], {9}
    forget_old_log(consumer, tp)
    for offset in range(5):
        consumer._acked[tp].append(offset)
        consumer._acked_index[tp].add(offset)
    assert consumer._new_offset(tp) == 5
    assert consumer._committed_offset[other] == 3  # the other partitions keep theirs


def test_without_the_patch_faust_commits_past_an_offset_no_agent_handled(settings):
    """What kafka_tuning's _new_offset fixes: on the same state (offset 2 is the next to read, only 3 was handled)
    Faust's own arithmetic commits 4, so a restarted consumer never reads 2; Jev's commits nothing yet."""
    from faust.types import TP

    from streams.runtime.app import create_app
    from streams.runtime.kafka_tuning import faust_new_offset

    consumer = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).faust.consumer
    tp = TP("jev.scored.v1", 0)
    consumer._committed_offset[tp] = 2
    consumer._acked[tp], consumer._acked_index[tp] = [3], {3}
    assert faust_new_offset(consumer, tp) == 4, "Faust's commit passes offset 2"
    consumer._acked[tp], consumer._acked_index[tp] = [3], {3}
    assert consumer._new_offset(tp) is None


async def test_without_the_patch_every_fetch_of_the_stage_app_waits_faust_s_one_and_a_half_seconds(settings):
    """What kafka_tuning's consumer thread fixes: Faust builds its aiokafka consumer with a 1.5 s fetch wait, which
    a broker that holds an empty fetch open adds to every hop; the stage app's thread builds it with 5 ms."""
    from faust.transport.drivers import aiokafka as driver

    from streams.runtime.app import create_app
    from streams.runtime.kafka_tuning import FETCH_MAX_WAIT_MS, JevConsumerThread

    app = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).faust
    consumer = app.consumer
    jev = consumer._new_consumer_thread()
    faust = driver.AIOKafkaConsumerThread(consumer, loop=consumer.loop, beacon=consumer.beacon)
    assert isinstance(jev, JevConsumerThread) and not isinstance(faust, JevConsumerThread)
    assert faust._create_worker_consumer(app.transport)._fetch_max_wait_ms == 1500
    assert jev._create_worker_consumer(app.transport)._fetch_max_wait_ms == FETCH_MAX_WAIT_MS == 5


def test_without_the_patch_faust_remembers_read_offsets_and_so_drops_a_message_read_again(settings, monkeypatch):
    """What kafka_tuning's _reset_state fixes: Faust's consumer remembers the highest offset it read per partition
    and its fetch loop drops any message below it, so a message sought back to (a rebalance, a recovery) is never
    handled; Jev's read offsets are never known."""
    from faust.transport.drivers import aiokafka as driver
    from faust.types import TP

    from streams.runtime.app import create_app
    from streams.runtime.kafka_tuning import faust_reset_state

    tp = TP("jev.scored.v1", 0)
    broker = settings.replace(broker="kafka://127.0.0.1:9")
    jev = create_app(broker, {"ranking"}, sink=object()).faust.consumer
    app = create_app(broker, {"ranking"}, sink=object()).faust  # installs Jev's patches; its consumer is made later
    monkeypatch.setattr(driver.Consumer, "_reset_state", faust_reset_state)
    faust = app.consumer
    for consumer in (jev, faust):
        consumer._read_offset[tp] = 9
    assert faust._read_offset[tp] == 9, "Faust's fetch loop drops offsets 0-8 when read again"
    assert jev._read_offset[tp] is None


async def test_the_stage_apps_commit_does_not_wait_for_the_l1_changelog_to_be_flushed(settings):
    """A commit of handled offsets goes out while Faust's producer (the L1 table's changelog, a cache) still holds
    writes: as shipped, Faust flushed that producer first, which under load held each commit back for seconds, and
    a process killed meanwhile left its successor what it had handled to do again."""
    from faust.types import TP

    from streams.runtime.app import create_app
    from streams.runtime.kafka_tuning import faust_commit_offsets

    app = create_app(settings.replace(broker="kafka://127.0.0.1:9"), {"ranking"}, sink=object()).faust
    consumer, tp, committed, never = app.consumer, TP("jev.distilled.v1", 0), [], asyncio.Event()

    async def commit(offsets) -> bool:  # the broker's OffsetCommit
        committed.append(dict(offsets))
        return True

    async def flush() -> None:  # a changelog write that does not go out
        await never.wait()

    consumer._commit, consumer.assignment, app.producer.flush = commit, lambda: {tp}, flush
    consumer._committed_offset[tp] = 2
    consumer._acked[tp], consumer._acked_index[tp] = [2, 3], {2, 3}
    assert await asyncio.wait_for(consumer.commit(), 10)
    assert committed == [{tp: 4}] and consumer._committed_offset[tp] == 4
    with pytest.raises(TimeoutError):  # Faust's own waits for the flush
        await asyncio.wait_for(faust_commit_offsets(consumer, {tp: 5}), 1)
    assert committed == [{tp: 4}]
