"""Reading topics in micro-batches, and handing what a stage returns for each to the one Sender before its
input is committed: `BatchConsumer` (plain aiokafka, explicit commits) for ingest, the usage sink and the
scoring workers; `run_agent` for the Faust agents that own a table's partitions (the cache and postprocess),
whose micro-batches take_work acknowledges and commits once they are handled."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import faust
import mode
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from streams.runtime.kafka_tuning import tune
from streams.security import signing

log = logging.getLogger("jev.consumer")
STOP_WAIT_S = 10.0  # the most a stopping BatchConsumer waits for its loop to hand over what it polled
# The longest an idle BatchConsumer's poll waits: polling every wait_ms (5-10 ms) cost each consumer 3-5% of a core
# in cross-thread wake-ups while nothing came (bench/model_path.py); aiokafka ends a poll as soon as records arrive.
IDLE_POLL_MS = 200
START_RETRY_S = 1.0


async def follow_from_start(
    bootstrap: str,
    topic: str,
    apply: Callable[[bytes], None],
    stopping: asyncio.Event,
    poll_ms: int,
    what: str,
    caught_up: Callable[[], None] | None = None,
    trusted: Callable[[object], bool] = signing.trusted,
    on_restart: Callable[[], None] | None = None,
) -> None:
    """Read `topic` from its beginning with a group-less consumer and keep following it until `stopping` is set,
    calling `apply` on each message: how every process rebuilds state a topic holds (controls, the cache's state).
    On a signed topic (streams.security.signing) a message Jev did not write is refused, counted and logged (`trusted`),
    never applied.
    A message `apply` fails on is logged as a malformed `what` and skipped; it never stops the process.
    `caught_up()` is called once, when every partition is read (and applied) up to the end its first fetch
    reported (CaughtUp), so while the topic is being written too. `on_restart()` is called when a partition's log
    came back shorter than what was read (a broker restarted without its data;
    streams.runtime.kafka_tuning.follow_log_restarts)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=50,
    )
    await consumer.start()
    tune(consumer, None if on_restart is None else lambda tp: on_restart())
    ends = CaughtUp(consumer)
    try:
        while not stopping.is_set():
            polled = await consumer.getmany(timeout_ms=poll_ms)
            for msgs in polled.values():
                for msg in msgs:
                    if not trusted(msg):
                        continue
                    try:
                        apply(msg.value)
                    except Exception as exc:
                        log.warning("skipping malformed %s at offset %s: %s", what, msg.offset, exc)
            if caught_up is not None and await ends.reached():
                caught_up()
                caught_up = None
    finally:
        await consumer.stop()


class CaughtUp:
    """Whether a group-less consumer has read every partition up to the end that partition had when it started:
    the high watermark of the first fetch response that named it (the log's true end; the local broker's
    ListOffsets can fall short of it, docs/operations.md). Records written later do not hold it back, so a topic that is
    written all the time (the requests-seen log under load) is caught up as soon as what it held is read."""

    def __init__(self, consumer):
        self.consumer = consumer
        self.ends: dict = {}

    async def reached(self) -> bool:
        assigned = self.consumer.assignment()
        for tp in assigned:
            if tp not in self.ends and (end := self.consumer.highwater(tp)) is not None:
                self.ends[tp] = end
        if not assigned:
            return False
        for tp in assigned:
            if tp not in self.ends or await self.consumer.position(tp) < self.ends[tp]:
                return False
        return True


async def take_work(stream, settings) -> AsyncIterator[list]:
    """The Work items of every WorkBatch that arrived within one micro-batch window: under load a stage
    handles many upstream messages per iteration and sends fewer, larger batches downstream.

    Once the caller asks for the next batch (so has handled this one and delivered what it sent), this one's
    events are acknowledged and, reading a topic, committed at once (Committer). Faust's own commit timer fell
    seconds behind on a loaded loop, and whatever a process had handled since its last commit is read and worked on
    again by the process that takes its partitions after it dies."""
    committer = Committer(stream.app.consumer) if isinstance(stream.channel, faust.Topic) else None
    async for events in stream.take_events(settings.stage_batch_max, within=settings.stage_batch_wait_ms / 1000):
        yield [work for event in events for work in event.value.items]
        for event in events:
            event.ack()  # take_events acknowledges them again (a no-op) and counts them out when it resumes
        if committer is not None:
            committer.ask()


class Committer:
    """Commits of a Faust consumer, asked for after each micro-batch. One runs at a time (Faust's commit does
    nothing while another is running); those asked for meanwhile come down to one more after it, which covers
    everything acknowledged by then."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer  # faust's Consumer (untyped)
        self.running: asyncio.Future | None = None
        self.again = False

    def ask(self) -> None:
        if self.running is not None and not self.running.done():
            self.again = True
        else:
            self.running = asyncio.ensure_future(self.commit())

    async def commit(self) -> None:
        while True:
            self.again = False
            await self.consumer.commit()
            if not self.again:
                return


async def run_agent(batches: AsyncIterator, handle: Callable[[object], Awaitable | object], sender) -> None:
    """A Faust agent's loop: each micro-batch (or message) handled (`handle` may be a coroutine function or a
    plain one), and the Outbox it returned delivered, before the next is taken (and the ones before
    acknowledged)."""
    async for batch in batches:
        outbox = handle(batch)
        await sender.deliver(await outbox if inspect.isawaitable(outbox) else outbox)


class OwnLoop:
    """An event loop in a thread of its own, for an aiokafka group consumer: its heartbeats go out while the
    process's own loop is busy. The stage process's loop stalled 20-47 s at a time on 2 loaded cores (load 12-16),
    and consumers whose heartbeats ran on it were dropped from their groups every 20-40 s (6 s sessions), each
    time a rebalance of every member and a batch whose commit failed, read again. Faust's consumer, which has a
    thread of its own, was not dropped once."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    async def call(self, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs) run on this loop (awaited there when it returns an awaitable); its result here."""

        async def run():
            result = fn(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), self.loop))

    def close(self) -> None:
        """Stop the loop once what still runs on it has finished (at most STOP_WAIT_S), and end the thread."""

        async def finish() -> None:
            if pending := [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
                await asyncio.wait(pending, timeout=STOP_WAIT_S)
            asyncio.get_running_loop().stop()

        asyncio.run_coroutine_threadsafe(finish(), self.loop)
        self.thread.join(timeout=STOP_WAIT_S + 1)
        if not self.thread.is_alive():
            self.loop.close()


S = TypeVar("S", bound=mode.Service)


def serve(app: faust.App, service: S) -> S:
    """`service`, started and stopped with `app` (Faust's app.service takes an instance as it does a class; its
    type names only the class)."""
    app.service(service)  # type: ignore[arg-type]
    return service


def group_consumer(bootstrap: str, group: str, wait_ms: int, *topics: str) -> AIOKafkaConsumer:
    """An aiokafka consumer in `group` as Jev's own group readers use it: offsets committed explicitly, a new
    group reads from the start, and a 6 s session (a dead member's partitions move on in seconds)."""
    return AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        fetch_max_wait_ms=wait_ms,
    )


class BatchConsumer(mode.Service):
    """A topic read in micro-batches straight from aiokafka, with offsets committed explicitly. The aiokafka
    consumer runs on a loop of its own (OwnLoop), so the handler's work never delays its heartbeats.

    Faust's per-message path (conductor, stream, take buffer, one ack per event) measured ~100 µs of CPU per
    message here, where getmany spends ~1 µs; and its offset bookkeeping needed the corrections in
    streams.runtime.kafka_tuning before it stopped losing messages in chaos runs. `handle(messages)` (aiokafka
    ConsumerRecords) returns the Outbox of the batch, which `sender` delivers; then exactly that batch's offsets
    are committed: at-least-once."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        handle: Callable,
        max_records: int,
        wait_ms: int,
        linger_ms: int = 0,
        depth: int = 1,
        sender=None,
        before: Callable | None = None,
        on_restart: Callable[[TopicPartition], None] | None = None,
        **kwargs,
    ):
        """`linger_ms`: once a poll returned something, keep polling for up to this long (or until max_records)
        before handling, so a consumer whose every handle() has a fixed cost (a ClickHouse insert) takes
        fewer, larger batches, as Faust's take(max, within) did. `depth`: micro-batches handled at once; with 2,
        the next batch is worked on while the one before waits for the broker to acknowledge what it sent.
        Offsets are committed in order either way, each batch's only once it and every batch before it were
        handled. `before`: a coroutine function awaited before the first poll (state the handler needs loaded).
        `on_restart(partition)`: called (on the consumer's own loop) when the broker restarted without the
        partition's log, before any record of the new log is handed over (kafka_tuning.follow_log_restarts)."""
        super().__init__(**kwargs)
        # not `on_restart`: that name is mode.Service's own restart hook, which this would shadow
        self.before, self.on_log_restart = before, on_restart
        self.bootstrap, self.topic, self.group, self.handle, self.sender = bootstrap, topic, group, handle, sender
        self.max_records, self.wait_ms, self.linger_ms, self.depth = max_records, wait_ms, linger_ms, depth
        self.consumer: Any = None  # an AIOKafkaConsumer (untyped) once started, on `own`, its own loop
        self.own: OwnLoop | None = None
        self.idle = asyncio.Event()  # set while no consume loop runs: on_stop waits for it
        self.idle.set()

    def own_loop(self) -> OwnLoop:
        """The loop the consumer runs on (made by on_start)."""
        if self.own is None:
            raise RuntimeError(f"the consumer of {self.topic} is not started")
        return self.own

    async def on_start(self) -> None:
        self.own = OwnLoop(f"jev-consumer-{self.group}")
        self.consumer = await self.own.call(self.start_consumer)

    async def start_consumer(self) -> AIOKafkaConsumer:
        """The started aiokafka consumer (on its own loop, which it binds to). A broker that cannot be reached
        (restarting as this consumer starts) is tried again every START_RETRY_S until the service stops: a
        consumer that raised here would take its whole process down."""
        while True:
            consumer = group_consumer(self.bootstrap, self.group, self.wait_ms, self.topic)
            try:
                await consumer.start()
            except KafkaConnectionError as exc:
                with contextlib.suppress(Exception):
                    await consumer.stop()
                if self.should_stop:
                    raise
                log.warning(
                    "consumer of %s: broker not reachable (%s); trying again in %s s", self.topic, exc, START_RETRY_S
                )
                await asyncio.sleep(START_RETRY_S)
                continue
            tune(consumer, self.on_log_restart)
            return consumer

    async def on_stop(self) -> None:
        """The consumer stopped once the loop has left it: the loop polls no more once the service stops, and
        hands over and commits what it holds first. Stopping the consumer under a pending getmany would crash
        the loop with ConsumerStoppedError. A handler stuck past STOP_WAIT_S is stopped under anyway."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.idle.wait(), STOP_WAIT_S + self.wait_ms / 1000)
        own = self.own_loop()
        await own.call(self.consumer.stop)
        await asyncio.to_thread(own.close)

    @mode.Service.task
    async def _consume(self) -> None:
        self.idle.clear()
        try:
            await self.consume()
        finally:
            self.idle.set()

    async def consume(self) -> None:
        """Poll and hand over micro-batches (up to `depth` at once), committing each once it and every batch before
        it were handled. The loop wakes when a poll returns or the oldest batch is done, never to poll again while
        nothing came: an empty poll doubles the next one's wait, up to IDLE_POLL_MS (records end a poll at once)."""
        handling: deque[tuple[asyncio.Future, dict]] = deque()  # (handle(batch), the batch), oldest first
        committing = polling = None  # the commit in flight; the poll in flight
        wait_ms = self.wait_ms
        if self.before is not None:
            await self.before()
        while not self.should_stop or handling or polling is not None:
            if polling is None and len(handling) < self.depth and not self.should_stop:
                polling = asyncio.ensure_future(self.poll(wait_ms))
            await asyncio.wait(
                [f for f in (polling, handling[0][0] if handling else None) if f is not None],
                return_when=asyncio.FIRST_COMPLETED,
            )
            if polling is not None and polling.done():
                polled, polling = polling.result(), None
                wait_ms = self.wait_ms if polled else min(max(IDLE_POLL_MS, self.wait_ms), 2 * wait_ms)
                if polled:  # handed over even while stopping: what was polled is handled and committed
                    handling.append(
                        (asyncio.ensure_future(self.hand_over([m for ms in polled.values() for m in ms])), polled)
                    )
            if not handling or not handling[0][0].done():
                continue
            task, polled = handling.popleft()
            try:
                await task
            except Exception:  # the handler isolates bad records; this is the infrastructure failing: read it again
                log.exception("a micro-batch of %s failed; reading it again in 1 s", self.topic)
                unhandled = [polled, *(batch for _, batch in handling)]
                if polling is not None:  # what it brings is read again from the rewound offsets too
                    unhandled.append(await polling)
                    polling = None
                await self.rewind(unhandled, [t for t, _ in handling])
                handling.clear()
                continue
            if committing is not None:
                await committing  # commits land in order
            # this batch's offsets, committed while the next batch is fetched (a round trip off the hot path)
            committing = asyncio.ensure_future(self.commit({tp: msgs[-1].offset + 1 for tp, msgs in polled.items()}))
        if committing is not None:
            await committing

    async def hand_over(self, messages: list) -> None:
        """The batch handled and what it returned delivered."""
        outbox = await self.handle(messages)
        if self.sender is not None:
            await self.sender.deliver(outbox)

    async def rewind(self, batches: list[dict], later: list[asyncio.Future]) -> None:
        """Back to the first message of every uncommitted batch, once the later ones have finished (what they sent
        may come again: at-least-once)."""
        await asyncio.gather(*later, return_exceptions=True)
        first: dict = {}
        for batch in batches:
            for tp, msgs in batch.items():
                first.setdefault(tp, msgs[0].offset)
        for tp, offset in first.items():
            await self.own_loop().call(self.consumer.seek, tp, offset)
        await asyncio.sleep(1.0)

    async def poll(self, wait_ms: int) -> dict:
        polled = await self.own_loop().call(self.consumer.getmany, timeout_ms=wait_ms, max_records=self.max_records)
        count = sum(len(msgs) for msgs in polled.values())
        deadline = time.monotonic() + self.linger_ms / 1000
        while (
            polled and count < self.max_records and not self.should_stop and (left := deadline - time.monotonic()) > 0
        ):  # a stopping consumer lingers no more
            for tp, msgs in (
                await self.own_loop().call(
                    self.consumer.getmany, timeout_ms=int(left * 1000) or 1, max_records=self.max_records - count
                )
            ).items():
                polled.setdefault(tp, []).extend(msgs)
                count += len(msgs)
        return polled

    async def commit(self, offsets: dict) -> None:
        try:
            await self.own_loop().call(self.consumer.commit, offsets)
        except KafkaError as exc:  # a rebalance or the broker restarting: these records may come again
            log.warning("offsets of %s not committed (%s); the batch may be redelivered", self.topic, exc)
