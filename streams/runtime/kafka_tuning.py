"""Changes to Faust's aiokafka consumer, installed by create_app: a short fetch wait, and offset commits that never
pass a message no agent has handled and do not wait for the L1 table's changelog. Every consumer of Jev's (`tune`)
also backs off while idle and reads a partition again from its beginning when a restarted broker's log of it ends
before its position.

Why: Faust hard-codes a 1.5 s fetch wait, which a broker that holds fetches open adds to every hop; and as shipped
(faust-streaming 0.15.3, aiokafka 0.14) its consumer could commit past messages it dropped during a rebalance or
table recovery, which lost usage events and decisions in chaos runs. docs/architecture.md has the three causes and
the measurements.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aiokafka import TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.consumer.fetcher import OffsetResetStrategy
from faust.transport.drivers import aiokafka as driver

from streams.core.metrics import LOG_RESTARTS

log = logging.getLogger("jev.kafka")

FETCH_MAX_WAIT_MS = 5
IDLE_FETCH_WAIT_MS = 100


def back_off_when_idle(consumer, longest_ms: int = IDLE_FETCH_WAIT_MS) -> None:
    """A started aiokafka consumer's fetch wait doubles with each fetch that brings nothing, up to `longest_ms`
    (or its own wait, if that is longer), and drops back to its own wait with the first that brings records."""
    fetcher = consumer._fetcher
    shortest, fetch = fetcher._fetch_max_wait_ms, fetcher._proc_fetch_request
    longest_ms = max(longest_ms, shortest)

    async def fetch_and_adapt(assignment, node_id, request) -> bool:
        got = await fetch(assignment, node_id, request)  # True once records were buffered
        fetcher._fetch_max_wait_ms = shortest if got else min(longest_ms, 2 * fetcher._fetch_max_wait_ms)
        return got

    fetcher._proc_fetch_request = fetch_and_adapt


def follow_log_restarts(consumer, on_restart: Callable[[TopicPartition], None] | None = None) -> None:
    """A started aiokafka consumer reads its partitions again from their beginning when the broker restarted
    without its data (the local tansu keeps its logs in memory). Kafka answers a fetch past a log's end with
    OffsetOutOfRange, which aiokafka resets by auto_offset_reset; such a broker answers with no error, and the
    consumer would skip every record written after the restart up to its old position. Two signs of it:
    - the cluster id changed (the local broker takes a new one at each start, infra/broker.py): before its first
      fetch, and before fetching over a new connection (after a broken one), the consumer asks the broker's
      metadata and fetches only once a broker has answered it, so a new log is known before a record of it is
      read at a stale position, however fast it grew and however the broker's start met the consumer's retries;
    - a partition's fetched high watermark is below the offset it was fetched at (impossible on a log that only
      grows): a broker that kept its cluster id.
    Each partition so restarted is logged, counted in jev_log_restarts_total{topic}, sought to its beginning and
    passed to `on_restart`. A fetch built before the reset is discarded by aiokafka (its offset no longer
    matches the position)."""
    fetcher, client = consumer._fetcher, consumer._client
    fetch, update = fetcher._proc_fetch_request, client.cluster.update_metadata
    cluster = {"id": None}

    def restart(tp: TopicPartition, state, why: str) -> None:
        log.warning("%s[%d]: %s; reading the partition again from its beginning", tp.topic, tp.partition, why)
        LOG_RESTARTS.labels(tp.topic).inc()
        state.await_reset(OffsetResetStrategy.EARLIEST)
        if on_restart is not None:
            on_restart(tp)

    def update_and_check(metadata) -> None:
        """Partitions read on the old cluster are reset before the new metadata can change the assignment."""
        known, cluster_id = cluster["id"], getattr(metadata, "cluster_id", None)
        cluster["id"] = cluster_id or known
        subscription = consumer._subscription.subscription
        assignment = subscription.assignment if subscription is not None else None
        if known is not None and cluster_id not in (None, known) and assignment is not None:
            for tp in assignment.tps:
                if (state := assignment.state_value(tp)) is not None and state.has_valid_position and state.position:
                    restart(
                        tp,
                        state,
                        f"the broker is now cluster {cluster_id}, was {known}: a restarted broker "
                        f"without its data (this consumer was at offset {state.position})",
                    )
        update(metadata)

    async def fetch_and_check(assignment, node_id, request) -> bool:
        conn = client._conns.get((node_id, ConnectionGroup.DEFAULT))
        if cluster["id"] is None or conn is None or not conn.connected():
            if not await client.force_metadata_update():
                # no broker answered: the fetch would open its connection unchecked to a broker that came back
                # since, and read its new log at the old position; fetch once an update has told its cluster id
                await asyncio.sleep(fetcher._retry_backoff)
                return False
        got = await fetch(assignment, node_id, request)
        if not assignment.active:
            return got
        for topic, partitions in request.topics:
            for partition, offset, *_ in partitions:
                tp = TopicPartition(topic, partition)
                state = assignment.state_value(tp)
                if (
                    state is None
                    or tp in fetcher._records
                    or not state.has_valid_position
                    or state.position != offset
                    or state.highwater is None
                    or state.highwater >= offset
                ):
                    continue
                restart(
                    tp,
                    state,
                    f"the log ends at offset {state.highwater}, before this consumer's position "
                    f"{offset}: the broker restarted without its data",
                )
        return got

    client.cluster.update_metadata = update_and_check
    fetcher._proc_fetch_request = fetch_and_check


def tune(consumer, on_restart: Callable[[TopicPartition], None] | None = None) -> None:
    """Both changes to a started aiokafka consumer: back_off_when_idle and follow_log_restarts."""
    back_off_when_idle(consumer)
    follow_log_restarts(consumer, on_restart)


class JevConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        tune(self._consumer, self.log_restarted)

    def log_restarted(self, tp: TopicPartition) -> None:
        """On the consumer's thread, once a partition was sought back to its beginning: Faust's bookkeeping
        forgets the old log's offsets, on the app's loop, before the new log's records reach it."""
        self.parent_loop.call_soon_threadsafe(forget_old_log, self.consumer, tp)

    async def seek_to_committed(self):
        committed, positions = await self.call_thread(seek_to_committed_or_beginning, self._ensure_consumer())
        self.consumer.jev_sought = positions
        return committed


async def seek_to_committed_or_beginning(consumer) -> tuple[dict, dict]:
    """Every assigned partition to its committed offset, or to its beginning where there is none. Returns
    aiokafka's {partition: committed offset or None} and {partition: the offset it will read next}."""
    committed = await consumer.seek_to_committed()
    uncommitted = [tp for tp, offset in committed.items() if not offset or offset < 0]
    if uncommitted:
        await consumer.seek_to_beginning(*uncommitted)
    return committed, {tp: await consumer.position(tp) for tp in committed}


def forget_old_log(consumer, tp: TopicPartition) -> None:
    """A Faust consumer's partition whose log the broker lost: its commits start again at the new log's first
    offset. Kept, the old log's committed offset would hold every commit of the new log back until it grew past
    that offset, and its acknowledged offsets would join runs of the new log's."""
    consumer._committed_offset[tp] = None
    consumer.jev_sought = {**getattr(consumer, "jev_sought", {}), tp: 0}
    consumer._acked.pop(tp, None)
    consumer._acked_index.pop(tp, None)
    consumer._gap.pop(tp, None)


def committable(acked: list[int], start: int | None) -> int | None:
    """The offset to commit for a partition whose next unhandled message is `start`, given its acknowledged
    offsets (sorted in place; the run committed is removed): one past the run of consecutive offsets that
    begins at `start`, or None while `start` itself is not acknowledged (or unknown)."""
    acked.sort()
    while acked and start is not None and acked[0] < start:
        acked.pop(0)
    if not acked or start is None or acked[0] != start:
        return None
    end = 0
    while end + 1 < len(acked) and acked[end + 1] == acked[end] + 1:
        end += 1
    last = acked[end]
    del acked[: end + 1]
    return last + 1


def _new_offset(self, tp):
    committed = self._committed_offset[tp]
    acked = self._acked[tp]
    before = list(acked)
    offset = committable(acked, committed if committed is not None else getattr(self, "jev_sought", {}).get(tp))
    self._acked_index[tp].difference_update(set(before) - set(acked))
    return offset


async def _commit_offsets(self, offsets, start_new_transaction: bool = True) -> bool:
    """Faust's commit of `offsets`, less the flush of Faust's producer it awaits first. That producer carries only
    the L1 table's changelog (every stage's output goes through the Sender before its input is acknowledged), so a
    commit waited on cache writes, seconds at a time under load, while a crash would only cost an L1 entry (one
    later miss). Faust's own commit still runs inside a transaction (Jev runs none)."""
    if self.in_transaction:
        return await faust_commit_offsets(self, offsets, start_new_transaction)
    assignment = self.assignment()
    committable = {tp: offset for tp, offset in offsets.items() if tp in assignment}
    if not committable:
        return False
    did_commit = await self._commit(committable)
    if did_commit:
        self.app.tables.on_commit(committable)
    self._committed_offset.update(committable)
    self.app.monitor.on_tp_commit(committable)
    return did_commit


class ReadOffsets(dict):
    """Faust's per-partition read offsets as its fetch loop sees them: never known, so it drops nothing."""

    def __getitem__(self, tp):
        return None


faust_reset_state = driver.Consumer._reset_state
faust_new_offset = driver.Consumer._new_offset  # Faust's own, kept for the tests that show what it gets wrong
faust_commit_offsets = driver.Consumer._commit_offsets


def _reset_state(self):
    faust_reset_state(self)
    self._read_offset = ReadOffsets()


def install() -> None:
    # Faust's consumer patched in place (mypy: method-assign): what breaks without each, tests/streams/runtime/
    # test_kafka_tuning.py
    driver.Consumer._new_consumer_thread = lambda self: JevConsumerThread(  # type: ignore[method-assign]
        self, loop=self.loop, beacon=self.beacon
    )
    driver.Consumer._new_offset = _new_offset  # type: ignore[method-assign]
    driver.Consumer._commit_offsets = _commit_offsets  # type: ignore[method-assign]
    driver.Consumer._reset_state = _reset_state  # type: ignore[method-assign]
