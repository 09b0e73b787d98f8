"""Partitioning by key: every stage topic and the L1 table are keyed the same way (crc32 of the key), so a
cache key's work, its L1 entry and its decisions stay on one partition from ingest to postprocess."""
from __future__ import annotations

import zlib
from collections import defaultdict
from typing import Callable, Iterable


def partition_for(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def group_by_partition(items: Iterable, key: Callable[[object], str], partitions: int) -> dict[int, list]:
    groups: dict[int, list] = defaultdict(list)
    for item in items:
        groups[partition_for(key(item), partitions)].append(item)
    return groups
