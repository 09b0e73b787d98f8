"""Consumer lag per group, topic and partition: end offset − committed offset.

End offsets are the high watermark of a Fetch response, not ListOffsets(LATEST), which the local broker answers
wrong whenever a produced batch holds more than one record (docs/operations.md). Committed offsets come from
OffsetFetch through a consumer that joins no group, so reading lag never disturbs the group.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from schemas.topics import name
from streams.core.metrics import set_consumer_lag

log = logging.getLogger("jev.lag")


async def groups(bootstrap: str) -> list[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return sorted(group for group, _ in await admin.list_consumer_groups())
    finally:
        await admin.close()


async def committed_offsets(bootstrap: str, group: str, tps: list[TopicPartition]) -> dict[TopicPartition, int | None]:
    """One OffsetFetch for every partition of `tps`. `committed(tp)` asks one partition per round trip: with every
    group and every partition of every topic, that was ~1,000 round trips per lag export in each process, 8% of
    the stage process's and 13% of a scoring worker's samples at saturation (py-spy)."""
    view = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await view.start()
    try:
        found = await view._coordinator.fetch_committed_offsets(tps)  # what committed() calls, for all at once
        return {tp: found[tp].offset if tp in found and found[tp].offset >= 0 else None for tp in tps}
    finally:
        await view.stop()


async def end_offsets(reader: AIOKafkaConsumer, tps: list[TopicPartition], timeout: float = 3.0) -> dict:
    """{tp: high watermark}; a partition whose Fetch did not answer within `timeout` is left out."""
    reader.assign(tps)
    for tp in tps:
        reader.seek(tp, 0)
    deadline = time.monotonic() + timeout
    while any(reader.highwater(tp) is None for tp in tps) and time.monotonic() < deadline:
        await reader.getmany(timeout_ms=200)
    return {tp: reader.highwater(tp) for tp in tps if reader.highwater(tp) is not None}


async def partition_lag(
    bootstrap: str, only_groups: list[str] | None = None, topics: list[str] | None = None, partitions: int = 0
) -> list[dict]:
    """One row per group and partition: {group, topic, partition, committed, end, lag}. Groups default to every
    group the broker knows; topics to those where the group committed an offset (named topics show every
    partition, committed None where the group has none: lag then counts from offset 0). Partitions come from
    the broker's metadata unless `partitions` is given."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=1024,
        fetch_max_wait_ms=100,
    )
    await reader.start()
    try:
        known = await reader.topics()  # also loads the metadata partitions_for_topic reads
        names = topics or sorted(t for t in known if not t.startswith("__"))
        tps = [
            TopicPartition(t, p)
            for t in names
            for p in (range(partitions) if partitions else sorted(reader.partitions_for_topic(t) or ()))
        ]
        rows = []
        for group in only_groups or await groups(bootstrap):
            committed = await committed_offsets(bootstrap, group, tps)
            rows += [(group, tp, offset) for tp, offset in committed.items() if offset is not None or topics]
        ends = await end_offsets(reader, sorted({tp for _, tp, _ in rows})) if rows else {}
    finally:
        await reader.stop()
    return [
        {
            "group": group,
            "topic": tp.topic,
            "partition": tp.partition,
            "committed": offset,
            "end": ends.get(tp),
            "lag": None if tp not in ends else max(0, ends[tp] - (offset or 0)),
        }
        for group, tp, offset in rows
    ]


async def consumer_lag(bootstrap: str, group: str, topics: list[str], partitions: int) -> dict[str, int | None]:
    """{topic: messages `group` has not committed yet} over `partitions` partitions per topic; None where the end
    offset of one of its partitions could not be read (unknown, not zero: callers wait on "drained")."""
    lag: dict[str, int | None] = {t: 0 for t in topics}
    for row in await partition_lag(bootstrap, [group], topics, partitions):
        topic = row["topic"]
        lag[topic] = None if row["lag"] is None or lag[topic] is None else lag[topic] + row["lag"]
    return lag


def reading_group(settings, topic: str) -> str:
    """The group that reads `topic`: ingest, the usage sink, the verdicts and the batch stage (stage process) and
    the shadow twins (scoring workers) have their own consumers, the Faust stages share app_id."""
    own = {
        name("requests"): settings.ingest_group,
        name("batch"): settings.batch_group,
        name("batch_merged"): settings.batch_merged_group,
        name("usage"): settings.usage_group,
        name("verdicts"): settings.verdicts_group,
        name("shadow"): settings.shadow_group,
    }
    return own.get(topic, settings.app_id)


async def stage_lag(settings, topics: list[str]) -> dict[str, int | None]:
    """consumer_lag of each of `topics` (full names) in the group of the stage that reads it."""
    lag: dict[str, int | None] = {}
    for topic in topics:
        lag.update(await consumer_lag(settings.bootstrap, reading_group(settings, topic), [topic], settings.partitions))
    return lag


async def export_lag(bootstrap: str) -> dict[tuple[str, str], int]:
    """Every group's lag per topic into the jev_consumer_lag_messages gauge; returns {(group, topic): lag}."""
    totals: dict[tuple[str, str], int] = {}
    for row in await partition_lag(bootstrap):
        key = (row["group"], row["topic"])
        totals[key] = totals.get(key, 0) + (row["lag"] or 0)
    for (group, topic), lag in totals.items():
        set_consumer_lag(group, topic, lag)
    return totals


async def export_lag_forever(bootstrap: str, interval_s: float = 15.0) -> None:
    """The scoring worker's background task: lag stays visible in Prometheus while the broker is up; a broker
    that is down or restarting is logged and tried again next round."""
    while True:
        try:
            await export_lag(bootstrap)
        except (KafkaError, OSError) as exc:
            log.warning("consumer lag not read (%s); retrying in %.0f s", exc, interval_s)
        await asyncio.sleep(interval_s)
