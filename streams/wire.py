"""Topic handles and partition-grouped sends shared by every stage."""
from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Iterable

import faust
import mode
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from schemas import records
from schemas.topics import TOPICS, name
from streams.deadletter import undecodable
from streams.kafka_tuning import back_off_when_idle

log = logging.getLogger("jev.wire")

VALUE_TYPES = {"distilled": records.WorkBatch, "score": records.WorkBatch,
               "scored": records.WorkBatch, "usage": records.UsageBatch, "decisions": records.Decision,
               "rejected": records.Rejection, "control": records.Control, "alerts": records.Alert,
               "review": records.Decision}


BATCH_TARGET_BYTES = 512 * 1024  # an internal envelope holds items up to this size (one larger item goes alone)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # producers' max_request_size: a Work carries a request of up to 1 MiB twice


def encode_batches(works: list) -> list[bytes]:
    """WorkBatch envelopes of at most BATCH_TARGET_BYTES each (each Work encoded once): a stage that takes
    many upstream batches must not emit one message past the broker's size limit."""
    envelopes, chunk, size = [], [], 0
    for work in works:
        raw = orjson.dumps(work.to_representation())
        if chunk and size + len(raw) > BATCH_TARGET_BYTES:
            envelopes.append(chunk)
            chunk, size = [], 0
        chunk.append(raw)
        size += len(raw) + 1
    if chunk:
        envelopes.append(chunk)
    return [b'{"items":[%s]}' % b",".join(chunk) for chunk in envelopes]


class DeadLetterTopic(faust.Topic):
    """A topic whose undecodable or malformed messages go to the rejected topic instead of crashing the agent
    (Faust's default throws the decode error into the agent, which crashes and restarts it). Records decode
    eagerly (schemas.records.Record.from_data), so a malformed nested record is a decode error too."""

    async def on_value_decode_error(self, exc: Exception, message) -> None:
        await self.app.send(name("rejected"), key=None, value=undecodable(message, exc))

    on_key_decode_error = on_value_decode_error


async def take_work(stream, settings):
    """The Work items of every WorkBatch that arrived within one micro-batch window: under load a stage
    handles many upstream messages per iteration and sends fewer, larger batches downstream."""
    async for batches in stream.take(settings.stage_batch_max, within=settings.stage_batch_wait_ms / 1000):
        yield [work for batch in batches for work in batch.items]


def partition_for(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def group_by_partition(items: Iterable, key: Callable[[object], str], partitions: int) -> dict[int, list]:
    groups: dict[int, list] = defaultdict(list)
    for item in items:
        groups[partition_for(key(item), partitions)].append(item)
    return groups


class KeyPartitionedTable(faust.Table):
    """A table whose changelog partition is its key's partition on the stage topics (partition_for), not the
    current event's: stages can write it from micro-batches (stream.take, where no single event is current),
    and it stays co-partitioned with the topics they key by the same value."""

    def partition_for_key(self, key) -> int:
        return partition_for(key, self.partitions)


class RecordProducer(mode.Service):
    """What the stages send downstream (decisions, work envelopes, usage) through a plain aiokafka producer that
    batches. Faust's producer sends every record as a batch of its own (producer_max_batch_size=1, for tansu's
    end offsets and table recovery), one in flight per partition: under load its queue grew to hundreds of
    messages, adding tens of ms per hop. It now carries only the L1 table's changelog and rare records.
    Every method returns once the broker has all of it, so a stage acknowledges its input only after that."""

    def __init__(self, bootstrap: str, **kwargs):
        super().__init__(**kwargs)
        self.bootstrap = bootstrap
        self.producer: AIOKafkaProducer | None = None

    async def on_start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                         max_batch_size=BATCH_TARGET_BYTES, max_request_size=MAX_MESSAGE_BYTES)
        await self.producer.start()

    async def on_stop(self) -> None:
        await self.producer.stop()

    async def send_all(self, topic: str, records: Iterable[tuple[str, faust.Record, dict[str, str]]]) -> None:
        """Keyed records with headers, one record batch per partition."""
        encoded = [(key, orjson.dumps(value.to_representation()), [(k, v.encode()) for k, v in headers.items()])
                   for key, value, headers in records]
        await self.deliver(topic, len(encoded), lambda: self.send_batches(topic, encoded))

    async def send_values(self, topic: str, values: list[tuple[int | None, bytes]]) -> None:
        """Unkeyed values, each to its partition (None: the producer's choice)."""
        async def send_each():
            return [await self.producer.send(topic, value, partition=partition) for partition, value in values]
        await self.deliver(topic, len(values), send_each)

    async def deliver(self, topic: str, count: int, attempt: Callable) -> None:
        """Run `attempt` (returns delivery futures) until the broker has everything; while it is unreachable,
        retry with backoff instead of crashing the agent (a crashed Faust agent stalls every later rebalance).
        A retry may repeat records that had already landed: at-least-once, identified by key or event id."""
        await self.maybe_start()  # agents can run before the app starts its services
        delay = 0.5
        while True:
            try:
                await asyncio.gather(*await attempt())
                return
            except KafkaError as exc:
                log.warning("%d records to %s not delivered (%s); retrying in %.1f s", count, topic, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def send_batches(self, topic: str, encoded: list[tuple[str, bytes, list]]) -> list[asyncio.Future]:
        """One record batch per partition (partition_for of the key, as the stages key their topics), built
        directly: aiokafka's per-record send() (a future, a pure-Python murmur2 and an accumulator lookup each)
        cost about 90 µs per decision."""
        partitions = len(await self.producer.partitions_for(topic))
        futures = []
        for partition, group in group_by_partition(encoded, lambda record: record[0], partitions).items():
            batch = self.producer.create_batch()
            for key, value, headers in group:
                if batch.append(key=key.encode(), value=value, timestamp=None, headers=headers) is None:
                    futures.append(await self.producer.send_batch(batch, topic, partition=partition))
                    batch = self.producer.create_batch()
                    batch.append(key=key.encode(), value=value, timestamp=None, headers=headers)
            futures.append(await self.producer.send_batch(batch, topic, partition=partition))
        return futures


class BatchConsumer(mode.Service):
    """A topic read in micro-batches straight from aiokafka, with offsets committed explicitly.

    Faust's per-message path (conductor, stream, take buffer, one ack per event) measured ~100 µs of CPU per
    message here, where getmany spends ~1 µs; and its offset bookkeeping needed the corrections in
    streams.kafka_tuning before it stopped losing messages in chaos runs. Here `handle(messages)` (aiokafka
    ConsumerRecords) must return only once its work is durable and everything it sent is acknowledged; then
    exactly that batch's offsets are committed: at-least-once."""

    def __init__(self, bootstrap: str, topic: str, group: str, handle: Callable, max_records: int, wait_ms: int,
                 linger_ms: int = 0, depth: int = 1, **kwargs):
        """`linger_ms`: once a poll returned something, keep polling for up to this long (or until max_records)
        before handling, so a consumer whose every handle() has a fixed cost (a ClickHouse insert) takes
        fewer, larger batches, as Faust's take(max, within) did. `depth`: micro-batches handled at once; with 2,
        the next batch is worked on while the one before waits for the broker to acknowledge what it sent.
        Offsets are committed in order either way, each batch's only once it and every batch before it were
        handled."""
        super().__init__(**kwargs)
        self.bootstrap, self.topic, self.group, self.handle = bootstrap, topic, group, handle
        self.max_records, self.wait_ms, self.linger_ms, self.depth = max_records, wait_ms, linger_ms, depth
        self.consumer: AIOKafkaConsumer | None = None

    async def on_start(self) -> None:
        self.consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                         enable_auto_commit=False, auto_offset_reset="earliest",
                                         session_timeout_ms=6000, heartbeat_interval_ms=1000,
                                         fetch_max_wait_ms=self.wait_ms)
        await self.consumer.start()
        back_off_when_idle(self.consumer)

    async def on_stop(self) -> None:
        await self.consumer.stop()

    @mode.Service.task
    async def _consume(self) -> None:
        handling: deque[tuple[asyncio.Future, dict]] = deque()  # (handle(batch), the batch), oldest first
        committing = None
        while not self.should_stop or handling:
            if len(handling) < self.depth and not self.should_stop:
                if polled := await self.poll():
                    handling.append((asyncio.ensure_future(self.handle([m for ms in polled.values() for m in ms])),
                                     polled))
                    continue
            if not handling or (len(handling) < self.depth and not handling[0][0].done() and not self.should_stop):
                continue
            task, polled = handling.popleft()
            try:
                await task
            except Exception:  # the handler isolates bad records; this is the infrastructure failing: read it again
                log.exception("a micro-batch of %s failed; reading it again in 1 s", self.topic)
                await self.rewind([polled, *(batch for _, batch in handling)], [t for t, _ in handling])
                handling.clear()
                continue
            if committing is not None:
                await committing  # commits land in order
            # this batch's offsets, committed while the next batch is fetched (a round trip off the hot path)
            committing = asyncio.ensure_future(self.commit({tp: msgs[-1].offset + 1 for tp, msgs in polled.items()}))
        if committing is not None:
            await committing

    async def rewind(self, batches: list[dict], later: list[asyncio.Future]) -> None:
        """Back to the first message of every uncommitted batch, once the later ones have finished (what they sent
        may come again: at-least-once)."""
        await asyncio.gather(*later, return_exceptions=True)
        first: dict = {}
        for batch in batches:
            for tp, msgs in batch.items():
                first.setdefault(tp, msgs[0].offset)
        for tp, offset in first.items():
            self.consumer.seek(tp, offset)
        await asyncio.sleep(1.0)

    async def poll(self) -> dict:
        polled = await self.consumer.getmany(timeout_ms=self.wait_ms, max_records=self.max_records)
        count = sum(len(msgs) for msgs in polled.values())
        deadline = time.monotonic() + self.linger_ms / 1000
        while polled and count < self.max_records and (left := deadline - time.monotonic()) > 0:
            for tp, msgs in (await self.consumer.getmany(timeout_ms=int(left * 1000) or 1,
                                                         max_records=self.max_records - count)).items():
                polled.setdefault(tp, []).extend(msgs)
                count += len(msgs)
        return polled

    async def commit(self, offsets: dict) -> None:
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:  # a rebalance or the broker restarting: these records may come again
            log.warning("offsets of %s not committed (%s); the batch may be redelivered", self.topic, exc)


@dataclass
class Topics:
    """One faust topic per registry entry; `requests` is raw bytes so bad input reaches our decoder."""
    app: faust.App
    partitions: int

    def __post_init__(self):
        bootstrap = ",".join(f"{url.host}:{url.port}" for url in self.app.conf.broker)
        self.records = self.app.service(RecordProducer(bootstrap))
        for short, spec in TOPICS.items():
            if short in VALUE_TYPES:
                topic = DeadLetterTopic(self.app, topics=[spec.name], value_type=VALUE_TYPES[short],
                                        key_type=str, partitions=self.partitions)
            else:
                topic = self.app.topic(spec.name, value_serializer="raw", key_serializer="raw",
                                       partitions=self.partitions)
            setattr(self, short, topic)

    async def send_work(self, topic: faust.TopicT, works: list, key: Callable[[object], str]) -> None:
        """Deliver `works` as WorkBatch envelopes, one per partition of `key` (keeps per-key order)."""
        if works:
            await self.records.send_values(topic.get_topic_name(), [
                (partition, envelope) for partition, group in group_by_partition(works, key, self.partitions).items()
                for envelope in encode_batches(group)])

    async def send_decisions(self, decisions: list[records.Decision],
                             headers: Callable[[records.Decision], dict]) -> None:
        """The caller-facing output, one record per message keyed by request id, batched by RecordProducer."""
        if decisions:
            await self.records.send_all(self.decisions.get_topic_name(),
                                        ((d.request_id, d, headers(d)) for d in decisions))

    async def send_usage(self, events: list) -> None:
        if events:
            await self.records.send_values(self.usage.get_topic_name(),
                                           [(None, records.UsageBatch(events=events).dumps())])
