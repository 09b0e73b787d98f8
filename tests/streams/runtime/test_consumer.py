"""The micro-batch consumer against the real broker: batches handed over, what they return delivered by the
sender before their offsets are committed, failed batches read again."""

import asyncio
import time

from aiokafka import AIOKafkaProducer, TopicPartition

from infra.broker import LocalBroker, create_topics, free_port
from streams.core.outbox import Outbox
from streams.runtime.consumer import BatchConsumer, follow_from_start
from tests.conftest import fresh_topic


async def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "nothing arrived in time"
        await asyncio.sleep(0.05)


async def test_a_follower_is_caught_up_while_the_topic_is_still_written(broker):
    """Real broker: caught_up() comes once everything the topic held at the start is applied, although new records
    keep arriving every 50 ms (the requests-seen log under load). It waited for 0.5 s without a record, so a
    restarted stage process took its first input only after LOAD_TIMEOUT_S (60 s) while traffic flowed."""
    topic = "test.follow_from_start"
    held = [b"h%d" % i for i in range(300)]
    bootstrap = await fresh_topic(broker, topic, 4, held)
    applied, stopping, at_caught_up = [], asyncio.Event(), []
    writing = asyncio.Event()
    writing.set()

    async def write() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            for i in range(1200):  # 60 s at most: the follower must be caught up long before
                if at_caught_up:
                    return
                await producer.send_and_wait(topic, b"n%d" % i)
                await asyncio.sleep(0.05)
        finally:
            writing.clear()
            await producer.stop()

    writer = asyncio.create_task(write())
    await until(lambda: writing.is_set())
    follower = asyncio.create_task(
        follow_from_start(
            bootstrap,
            topic,
            applied.append,
            stopping,
            100,
            "test record",
            trusted=lambda msg: True,
            caught_up=lambda: at_caught_up.append((set(applied), writing.is_set())),
        )
    )
    await until(lambda: at_caught_up, timeout=120)
    stopping.set()
    await asyncio.gather(follower, writer)
    seen, still_writing = at_caught_up[0]
    assert set(held) <= seen, "everything the topic held before was applied first"
    assert still_writing, "caught up while records kept arriving"
    assert len(at_caught_up) == 1


async def test_batch_consumer_hands_over_micro_batches_and_resumes_after_its_commits(broker):
    """Real broker: every record reaches `handle` once per group, as the consumed message; a second consumer of
    the group starts after the first one's committed offsets."""
    topic = "test.batch_consumer"
    bootstrap = await fresh_topic(broker, topic, 4)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    for i in range(30):
        await producer.send(topic, None if i == 7 else b"m%d" % i, key=b"k%d" % i)
    await producer.flush()
    seen, batches = [], []

    async def handle(messages):
        batches.append(len(messages))
        seen.extend(m.value for m in messages)

    first = BatchConsumer(bootstrap, topic, "test-group", handle, max_records=500, wait_ms=5)
    await first.start()
    await until(lambda: len(seen) == 30)
    await first.stop()
    assert sorted(seen, key=str) == sorted([None] + [b"m%d" % i for i in range(30) if i != 7], key=str)
    assert len(batches) < 30, "records arrive in micro-batches"
    second = BatchConsumer(bootstrap, topic, "test-group", handle, max_records=500, wait_ms=5)
    await second.start()
    for i in range(30, 35):
        await producer.send(topic, b"m%d" % i)
    await producer.flush()
    await until(lambda: len(seen) >= 35)
    await second.stop()
    await producer.stop()
    assert sorted(seen[30:]) == [b"m%d" % i for i in range(30, 35)], "nothing committed came again"


async def test_batch_consumer_reads_a_failed_batch_again(broker):
    topic = "test.batch_consumer_retry"
    bootstrap = await fresh_topic(broker, topic, 1, [b"m%d" % i for i in range(5)])
    calls = []

    async def handle(messages):
        calls.append([m.value for m in messages])
        if len(calls) == 1:
            raise ConnectionError("the broker went away mid-batch")

    consumer = BatchConsumer(bootstrap, topic, "test-retry", handle, max_records=500, wait_ms=5)
    await consumer.start()
    await until(lambda: len(calls) >= 2)
    await consumer.stop()
    assert calls[0][0] == b"m0" and calls[1][: len(calls[0])] == calls[0], "the failed batch came again, from its start"


async def test_batch_consumer_lingers_until_it_holds_max_records(broker):
    topic = "test.batch_consumer_linger"
    bootstrap = await fresh_topic(broker, topic, 4, [b"m%d" % i for i in range(10)])
    batches = []

    async def handle(messages):
        batches.append(sorted(m.value for m in messages))

    consumer = BatchConsumer(bootstrap, topic, "test-linger", handle, max_records=10, wait_ms=5, linger_ms=20_000)
    await consumer.start()
    await until(lambda: batches)
    await consumer.stop()
    assert batches == [sorted(b"m%d" % i for i in range(10))], "one batch: it kept polling until it held 10"


async def test_batch_consumer_works_on_the_next_batch_while_one_waits_and_commits_in_order(broker):
    topic = "test.batch_consumer_depth"
    bootstrap = await fresh_topic(broker, topic, 1, [b"m%d" % i for i in range(20)])
    second_started = asyncio.Event()
    calls = []

    async def handle(messages):
        calls.append([m.offset for m in messages])
        if len(calls) == 1:
            await second_started.wait()  # the first batch waits on its deliveries until the second is under way
        elif len(calls) == 2:
            second_started.set()
        if len(calls) == 3:
            raise ConnectionError("the broker went away mid-batch")

    consumer = BatchConsumer(bootstrap, topic, "test-depth", handle, max_records=5, wait_ms=5, depth=2)
    await consumer.start()
    await until(lambda: sum(map(len, calls)) >= 25)
    await consumer.stop()
    assert calls[:2] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], "the second batch started before the first finished"
    read = [offset for batch in calls for offset in batch]
    assert calls[2] == [10, 11, 12, 13, 14] and calls[2] in calls[3:], "the failed batch came again from its start"
    assert all(read.count(offset) == 1 for offset in range(10)), "the two batches before it were committed"
    assert set(read) == set(range(20))


class RecordingSender:
    def __init__(self, committed):
        self.delivered, self.committed = [], committed

    async def deliver(self, outbox):
        self.delivered.append((outbox, list(self.committed)))


async def test_what_a_batch_returns_is_delivered_before_its_offsets_are_committed(broker):
    topic = "test.batch_consumer_sender"
    bootstrap = await fresh_topic(broker, topic, 1, [b"m%d" % i for i in range(3)])
    committed = []

    async def handle(messages):
        return Outbox(records=[("batch_results", None, m.value) for m in messages])

    sender = RecordingSender(committed)
    consumer = BatchConsumer(bootstrap, topic, "test-sender", handle, max_records=500, wait_ms=5, sender=sender)
    real_commit = consumer.commit

    async def commit(offsets):
        committed.append(offsets)
        await real_commit(offsets)

    consumer.commit = commit
    await consumer.start()
    await until(lambda: committed)
    await consumer.stop()
    [(outbox, committed_before)] = sender.delivered
    assert [value for _, _, value in outbox.records] == [b"m0", b"m1", b"m2"] and committed_before == []


async def test_stopping_while_a_batch_lingers_hands_it_over_and_is_clean(broker, caplog):
    """Stopped while a poll lingers for more of its batch: the loop stops lingering, hands over and commits what
    it holds, and only then is the consumer stopped; nothing crashes (ConsumerStoppedError) and a second consumer
    of the group finds nothing left to read."""
    topic = "test.batch_consumer_stop"
    bootstrap = await fresh_topic(broker, topic, 1, [b"m0"])
    seen = []

    async def handle(messages):
        seen.extend(m.value for m in messages)

    consumer = BatchConsumer(bootstrap, topic, "test-stop", handle, max_records=10, wait_ms=100, linger_ms=5000)
    await consumer.start()
    await until(lambda: not consumer.idle.is_set())
    await asyncio.sleep(2.0)  # m0 polled; the loop lingers for more before handing it over
    assert seen == []
    started = time.monotonic()
    await consumer.stop()
    assert time.monotonic() - started < 3
    assert seen == [b"m0"] and consumer.idle.is_set() and not consumer.crashed
    assert "ConsumerStoppedError" not in caplog.text and "Crashed" not in caplog.text
    again = BatchConsumer(bootstrap, topic, "test-stop", handle, max_records=10, wait_ms=100)
    await again.start()
    await asyncio.sleep(1.0)
    await again.stop()
    assert seen == [b"m0"], "the handed-over batch was committed"


async def test_partitions_revoked_while_a_batch_is_handled_lose_no_record(broker):
    """Real broker: a second member joins while the first one's batch is still being handled (its consumer, on a
    loop of its own, goes through the rebalance meanwhile): the batch's commit may be refused and its records read
    again, but every record is handled at least once, and what the group committed at the end covers them all."""
    topic = "test.batch_consumer_rebalance"
    values = [b"m%d" % i for i in range(40)]
    bootstrap = await fresh_topic(broker, topic, 2, values)
    seen: dict[str, list] = {"first": [], "second": []}
    members: dict[str, BatchConsumer] = {}

    def handler(who: str):
        async def handle(messages):
            if who == "first" and not seen["first"]:  # held until the group rebalanced under it
                await until(lambda: "second" in members and members["second"].consumer.assignment(), timeout=60)
            seen[who].extend(m.value for m in messages)

        return handle

    members["first"] = BatchConsumer(
        bootstrap, topic, "test-rebalance", handler("first"), max_records=5, wait_ms=5, depth=2
    )
    await members["first"].start()
    await until(lambda: not members["first"].idle.is_set() and members["first"].consumer.assignment())
    second = BatchConsumer(bootstrap, topic, "test-rebalance", handler("second"), max_records=5, wait_ms=5)
    await second.start()
    members["second"] = second
    await until(lambda: set(seen["first"]) | set(seen["second"]) == set(values), timeout=60)
    await until(lambda: all(len(m.consumer.assignment()) == 1 for m in members.values()), timeout=60)
    await asyncio.sleep(2.0)  # the last commits
    for member in members.values():
        await member.stop()
    assert seen["second"], "the second member took a partition over and read it"
    left = []

    async def collect(messages):
        left.extend(m.value for m in messages)

    again = BatchConsumer(bootstrap, topic, "test-rebalance", collect, max_records=50, wait_ms=100)
    await again.start()
    await asyncio.sleep(2.0)
    await again.stop()
    assert left == [], "the group's commits cover every record"


async def test_a_busy_loop_does_not_drop_batch_consumers_from_their_group(broker, caplog):
    """Real broker: a handler that holds the process's event loop past the 6 s session (a stage loop stalled 20-47 s
    on a loaded machine) costs no member of the group its membership or its commit, since heartbeats go out from
    loops of their own. With heartbeats on the blocked loop, the first member heard from after it had the other
    dropped (rebalance, refused commit, the batch read again)."""
    topic = "test.batch_consumer_busy"
    bootstrap = await fresh_topic(broker, topic, 2)
    seen = []

    async def handle(messages):
        time.sleep(8.0)  # CPU-bound work holding the loop (no await)
        seen.extend(m.value for m in messages)

    members = [BatchConsumer(bootstrap, topic, "test-busy", handle, max_records=10, wait_ms=100) for _ in range(2)]
    for member in members:
        await member.start()
    await until(lambda: all(len(m.consumer.assignment()) == 1 for m in members), timeout=60)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    await producer.send_and_wait(topic, b"m0", partition=0)
    await producer.stop()
    await until(lambda: seen == [b"m0"], timeout=60)
    await asyncio.sleep(3.0)  # heartbeats and the commit of m0
    assert all(len(m.consumer.assignment()) == 1 for m in members), "nobody was dropped"
    for member in members:
        await member.stop()
    assert "not recognized" not in caplog.text and "not committed" not in caplog.text
    seen.clear()
    again = BatchConsumer(bootstrap, topic, "test-busy", handle, max_records=10, wait_ms=100)
    await again.start()
    await asyncio.sleep(2.0)
    await again.stop()
    assert seen == [], "m0 was committed"


async def test_batch_consumer_says_the_broker_restarted_before_it_hands_over_the_new_log():
    """tansu restarted without its data: `on_restart` (ingest orphans the requests it admitted and had not
    decided) is called before the first record of the new log reaches `handle`, so a redelivery in it is not
    taken for a request still in flight. The group's commit can fail across the restart, and a batch come
    again after it (at-least-once)."""
    topic = "test.batch_consumer_restart"
    with LocalBroker() as broker:
        bootstrap = broker.url.removeprefix("kafka://")
        await create_topics(bootstrap, [topic], 1)
        restarted, handled = [], []

        async def handle(messages):
            handled.extend((m.value, len(restarted)) for m in messages)

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        consumer = BatchConsumer(
            bootstrap, topic, "test-restart", handle, max_records=500, wait_ms=5, on_restart=restarted.append
        )
        await consumer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, b"old%d" % i)
            await until(lambda: len(handled) == 10)
            broker.stop()
            broker.start()
            await create_topics(bootstrap, [topic], 1)
            for i in range(3):  # on partition 0: the consumer's metadata request can make tansu create the topic
                # again with its default 4 partitions before create_topics asks for 1, and a partition chosen by the
                # producer would then spread the new log over four (handed out of order: new1 before new0)
                await producer.send_and_wait(topic, b"new%d" % i, partition=0)
            await until(lambda: len(handled) >= 13, timeout=60)
        finally:
            await consumer.stop()
            await producer.stop()
    assert handled[:10] == [(b"old%d" % i, 0) for i in range(10)]
    assert [value for value, _ in handled[10:13]] == [b"new0", b"new1", b"new2"], "the new log, from its start"
    assert all(told for _, told in handled[10:]), "on_restart came before the new log was handed over"
    assert restarted and set(restarted) == {TopicPartition(topic, 0)}


async def test_a_batch_consumer_started_while_its_broker_is_down_waits_for_it_and_reads():
    """A consumer whose process starts while the broker restarts tries again until the broker answers (it raised
    "Unable to bootstrap", which took the whole stage process down), then reads as any other."""
    port, topic, handled = free_port(), "test.started_before_its_broker", []

    async def handle(messages):
        handled.extend(m.value for m in messages)

    consumer = BatchConsumer(f"127.0.0.1:{port}", topic, "test-late-broker", handle, max_records=10, wait_ms=5)
    starting = asyncio.create_task(consumer.start())
    await asyncio.sleep(2.5)
    assert not starting.done(), "started with no broker to read"
    with LocalBroker(port) as broker:
        bootstrap = broker.url.removeprefix("kafka://")
        await create_topics(bootstrap, [topic], 1)
        await asyncio.wait_for(starting, 60)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, "订单 order 1".encode())
            await until(lambda: handled == ["订单 order 1".encode()], timeout=60)
        finally:
            await producer.stop()
            await consumer.stop()


async def test_commits_asked_for_while_one_runs_come_down_to_one_more_after_it():
    """Committer: Faust's commit does nothing while another runs, so an ask that came meanwhile must not be lost
    (the last micro-batch's offsets would wait for the commit timer), nor each one queue a commit of its own."""
    from streams.runtime.consumer import Committer

    release, calls = asyncio.Event(), []

    class Consumer:
        async def commit(self) -> bool:
            calls.append(len(calls))
            if len(calls) == 1:
                await release.wait()
            return True

    committer = Committer(Consumer())
    committer.ask()
    await until(lambda: calls == [0])
    committer.ask()
    committer.ask()
    committer.ask()
    release.set()
    await until(lambda: committer.running.done())
    assert calls == [0, 1]
    committer.ask()
    await until(lambda: committer.running.done())
    assert calls == [0, 1, 2]


async def test_a_faust_agents_micro_batches_are_committed_once_handled_not_at_the_commit_timer(broker, settings):
    """take_work on the real broker, with Faust's commit timer set to an hour: every offset the agent handled is
    committed all the same, so a process killed after handling them leaves its successor none to read again. As
    shipped, they waited for the timer (2.8 s, which ran every 6-9 s on a loaded loop, docs/operations.md)."""
    import faust

    from schemas.records import Request, Work, WorkBatch
    from streams.runtime import kafka_tuning
    from streams.runtime.consumer import take_work
    from workers.analytics.lag import committed_offsets

    topic, group = "test.take_work", "test-take-work"
    works = [
        Work(
            request=Request(request_id=f"r{i}", tenant="acme", service="s", decision_type="ranking", state=state),
            admitted_at=0.0,
            model="gpt-4o-mini",
        )
        for i, state in enumerate(["trail shoes", "登山鞋", "a loafer", "皮鞋", "sandals", "凉鞋"])
    ]
    bootstrap = await fresh_topic(broker, topic, 2, [WorkBatch(items=[w]).dumps() for w in works])
    kafka_tuning.install()
    app = faust.App(
        group,
        broker=broker.url,
        store="memory://",
        web_enabled=False,
        datadir=str(settings.data_dir),
        topic_partitions=2,
        broker_commit_interval=3600,
        consumer_auto_offset_reset="earliest",
    )
    handled: list[str] = []

    @app.agent(app.topic(topic, value_type=WorkBatch, partitions=2))
    async def agent(stream):
        async for batch in take_work(stream, settings):
            handled.extend(w.request.state for w in batch)

    worker = faust.Worker(app, loop=asyncio.get_running_loop(), daemon=False, redirect_stdouts=False, quiet=True)
    worker.spinner = None
    await worker.start()
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    try:
        await until(lambda: len(handled) == len(works), timeout=120)
        deadline = time.monotonic() + 30  # the commit is one round trip: seconds at most on a loaded machine
        while time.monotonic() < deadline:
            committed = {tp.partition: o for tp, o in (await committed_offsets(bootstrap, group, tps)).items()}
            if committed == {0: 3, 1: 3}:
                break
            await asyncio.sleep(0.2)
    finally:
        await worker.stop()
    assert sorted(handled) == sorted(w.request.state for w in works)
    assert committed == {0: 3, 1: 3}, "what the agent handled is not committed"
