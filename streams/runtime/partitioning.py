"""Partitioning by key: every stage topic and the L1 table are keyed the same way (crc32 of the key), so a
cache key's work, its L1 entry and its decisions stay on one partition from ingest to postprocess."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TypeVar

from aiokafka.partitioner import murmur2


def partition_for(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def kafka_partition(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives `key` (murmur2, as aiokafka's send() does): the requests-seen
    log's, which is compacted per key and so keeps each key on the partition it always had."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


T = TypeVar("T")


def group_by_partition(
    items: Iterable[T],
    key: Callable[[T], str],
    partitions: int,
    partition_of: Callable[[str, int], int] = partition_for,
) -> dict[int, list[T]]:
    groups: dict[int, list[T]] = defaultdict(list)
    for item in items:
        groups[partition_of(key(item), partitions)].append(item)
    return groups
