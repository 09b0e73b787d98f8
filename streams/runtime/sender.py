"""The one Sender: every stage's Outbox goes to Kafka through one batching aiokafka producer, delivered before the
stage's input is committed (at-least-once; records carry idempotency keys).

An outbox's usage events are acknowledged before the rest is sent, so a request is metered before anything says
it was handled; a process killed in between leaves usage its redelivery resends under the same event ids. Replies
also go to the topics of the tenant each answers (`jev.tenant.<slug>.<kind>.v1`), the only ones an upstream
principal may read. Faust's own producer carries the L1 table's changelog only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import mode
import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from infra.broker import create_topics
from schemas.records import UsageBatch
from schemas.topics import name
from streams.core.envelopes import BATCH_TARGET_BYTES, MAX_MESSAGE_BYTES, encode_batches
from streams.core.inflight import IN_FLIGHT, WORK_TOPICS
from streams.core.outbox import Outbox
from streams.core.tenants import reply_topic, reply_topics
from streams.idempotency.requests import LOG_TOPIC
from streams.runtime.partitioning import group_by_partition, kafka_partition, partition_for
from streams.security import signing

log = logging.getLogger("jev.sender")
Keyed = tuple[str, bytes, list[tuple[str, bytes]]]  # a record's key, value and headers
AHEAD = ("chunks", "usage")  # the Outbox fields delivered, and acknowledged, before the rest of their outbox


def encode(record) -> bytes:
    return orjson.dumps(record.to_representation())


def told_tenant(rejection) -> bytes:
    """A rejection as its tenant reads it: reason, detail and retry time, without the original request (up to
    64 KB of it, which only Jev's operators read, on jev.rejected.v1)."""
    return orjson.dumps({**rejection.to_representation(), "original": ""})


class Sender(mode.Service):
    """`deliver(outbox)` returns once the broker has all of it. `partitions`: the stage topics' partition
    count, which keys map onto (streams.runtime.partitioning)."""

    def __init__(self, bootstrap: str, partitions: int, **kwargs):
        super().__init__(**kwargs)
        self.bootstrap, self.partitions = bootstrap, partitions
        self.producer: Any = None  # an AIOKafkaProducer (untyped) once the service starts
        self.tenant_topics: dict[str, asyncio.Task] = {}  # tenant -> the creation of its reply topics

    async def on_start(self) -> None:
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks="all",
            max_batch_size=BATCH_TARGET_BYTES,
            max_request_size=MAX_MESSAGE_BYTES,
        )
        await self.producer.start()

    async def on_stop(self) -> None:
        await self.producer.stop()

    async def deliver(self, outbox: Outbox | None) -> None:
        """Send everything in `outbox` and wait for the broker's acknowledgements; while it is unreachable, retry
        with backoff instead of crashing the stage (a crashed Faust agent stalls every later rebalance). A retry
        may repeat records that had already landed: at-least-once, identified by key or event id."""
        if not outbox:
            return
        await self.maybe_start()  # agents can run before the app starts its services
        ahead = Outbox(chunks=outbox.chunks, usage=outbox.usage)
        if ahead and any(getattr(outbox, f.name) for f in dataclasses.fields(outbox) if f.name not in AHEAD):
            # acknowledged first: the usage (see above), and a streamed answer's chunks, which land before its
            # decision (a caller reads the chunks, then the totals)
            await self.deliver(ahead)
            outbox = dataclasses.replace(outbox, chunks=[], usage=[])
        delay = 0.5
        while True:
            try:
                await asyncio.gather(*await self.send(outbox))
                return
            except KafkaError as exc:
                log.warning("an outbox was not delivered (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    async def send(self, outbox: Outbox) -> list[asyncio.Future]:
        """Queue every record of `outbox` in order (chunks, decisions, review, usage, work, dead letters, alerts,
        batch records, records placed on a partition); the delivery futures. Chunks are keyed by request id,
        partitioned as decisions are."""
        keys, produce = signing.keyring(), self.producer.send

        async def send(topic: str, value: bytes, **placing) -> asyncio.Future:  # signed where Jev alone writes
            return await produce(topic, value, headers=keys.headers(topic, value), **placing)

        futures, seen_log = [], name(LOG_TOPIC)
        # a decision's requests-seen record goes out ahead of it: a process killed between the two then re-sends
        # that decision, not another
        seen = [
            (key.decode(), value, keys.headers(seen_log, value))
            for topic, key, value in outbox.records
            if topic == LOG_TOPIC and key is not None
        ]
        if seen:
            futures += await self.send_keyed(seen_log, seen, kafka_partition)
        IN_FLIGHT.release(
            [d.request_id for d, _ in outbox.decisions] + [r.request_id for r in outbox.dead_letters if r.request_id]
        )
        IN_FLIGHT.hold([w.request.request_id for topic in WORK_TOPICS for w in outbox.work.get(topic, ())])
        if outbox.chunks:
            chunks: list[tuple[str, Keyed]] = [(c.tenant, (c.request_id, encode(c), [])) for c in outbox.chunks]
            futures += await self.send_keyed(name("chunks"), [record for _, record in chunks])
            futures += await self.send_replies("chunks", chunks)
        if outbox.decisions:
            decisions = [
                (d.tenant, (d.request_id, encode(d), [(k, v.encode()) for k, v in headers.items()]))
                for d, headers in outbox.decisions
            ]
            futures += await self.send_keyed(name("decisions"), [record for _, record in decisions])
            futures += await self.send_replies("decisions", decisions)
        if outbox.review:
            review: list[tuple[str, Keyed]] = [(d.tenant, (d.request_id, encode(d), [])) for d in outbox.review]
            futures += await self.send_keyed(name("review"), [record for _, record in review])
            futures += await self.send_replies("review", review)
        if outbox.usage:
            futures.append(await send(name("usage"), UsageBatch(events=outbox.usage).dumps()))
        for topic, works in outbox.work.items():
            for partition, group in group_by_partition(works, lambda w: w.cache_key, self.partitions).items():
                futures += [
                    await send(name(topic), envelope, partition=partition) for envelope in encode_batches(group)
                ]
        keyed: list[Keyed] = [(r.request_id, encode(r), []) for r in outbox.dead_letters if r.request_id]
        if keyed:
            futures += await self.send_keyed(name("rejected"), keyed)  # a flood's rate_limited: thousands a batch
        told: list[tuple[str, Keyed]] = [
            (r.tenant, (r.request_id, told_tenant(r), [])) for r in outbox.dead_letters if r.tenant
        ]
        if told:
            futures += await self.send_replies("rejected", told)
        for kind, tenant, key, value in outbox.replies:
            await self.tenant_ready(tenant)
            futures.append(await send(reply_topic(kind, tenant), value, key=key))
        for rejection in outbox.dead_letters:
            if not rejection.request_id:
                futures.append(await send(name("rejected"), encode(rejection)))
        for alert in outbox.alerts:
            futures.append(await send(name("alerts"), encode(alert), key=alert.scope.encode()))
        for topic, key, value in outbox.records:
            if topic != LOG_TOPIC:
                futures.append(await send(name(topic), value, key=key))
        for topic, placed, value in outbox.placed:  # the partition was chosen by the stage (a budget key's)
            futures.append(await send(name(topic), value, partition=placed))
        return futures

    async def send_replies(self, kind: str, records: list[tuple[str, tuple[str, bytes, list]]]) -> list[asyncio.Future]:
        """`records` ((tenant, (key, value, headers)) each) on their tenants' `kind` reply topics; a record with no
        tenant went to the all-tenant topic only."""
        by_tenant: dict[str, list] = {}
        for tenant, record in records:
            if tenant:
                by_tenant.setdefault(tenant, []).append(record)
        futures = []
        for tenant, group in by_tenant.items():
            await self.tenant_ready(tenant)
            futures += await self.send_keyed(reply_topic(kind, tenant), group)
        return futures

    async def tenant_ready(self, tenant: str) -> None:
        """Create `tenant`'s reply topics the first time this process replies to it (once, however many sends
        wait for it; a failed creation is tried again by the next send)."""
        task = self.tenant_topics.get(tenant)
        if task is None or (task.done() and task.exception() is not None):
            task = self.tenant_topics[tenant] = asyncio.ensure_future(
                create_topics(self.bootstrap, reply_topics(tenant), self.partitions)
            )
        await asyncio.shield(task)

    async def send_keyed(
        self, topic: str, encoded: list[tuple[str, bytes, list]], partition_of=partition_for
    ) -> list[asyncio.Future]:
        """One record batch per partition (`partition_of` the key: partition_for, as the stages key their topics),
        built directly: aiokafka's per-record send() (a future, a pure-Python murmur2 and an accumulator lookup
        each) cost about 90 µs per decision or dead letter."""
        partitions = len(await self.producer.partitions_for(topic))
        futures = []
        for partition, group in group_by_partition(encoded, lambda record: record[0], partitions, partition_of).items():
            batch = self.producer.create_batch()
            for key, value, headers in group:
                if batch.append(key=key.encode(), value=value, timestamp=None, headers=headers) is None:
                    futures.append(await self.producer.send_batch(batch, topic, partition=partition))
                    batch = self.producer.create_batch()
                    batch.append(key=key.encode(), value=value, timestamp=None, headers=headers)
            futures.append(await self.producer.send_batch(batch, topic, partition=partition))
        return futures
