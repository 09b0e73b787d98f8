"""Topic handles and partition-grouped sends shared by every stage."""
from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import faust

from schemas import records
from schemas.topics import TOPICS

VALUE_TYPES = {"admitted": records.WorkBatch, "distilled": records.WorkBatch, "score": records.WorkBatch,
               "scored": records.WorkBatch, "usage": records.UsageBatch, "decisions": records.Decision,
               "rejected": records.Rejection, "control": records.Control, "alerts": records.Alert,
               "review": records.Decision}


def partition_for(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def group_by_partition(items: Iterable, key: Callable[[object], str], partitions: int) -> dict[int, list]:
    groups: dict[int, list] = defaultdict(list)
    for item in items:
        groups[partition_for(key(item), partitions)].append(item)
    return groups


@dataclass
class Topics:
    """One faust topic per registry entry; `requests` is raw bytes so bad input reaches our decoder."""
    app: faust.App
    partitions: int

    def __post_init__(self):
        for short, spec in TOPICS.items():
            if short in VALUE_TYPES:
                topic = self.app.topic(spec.name, value_type=VALUE_TYPES[short], key_type=str,
                                       partitions=self.partitions)
            else:
                topic = self.app.topic(spec.name, value_serializer="raw", key_serializer="raw",
                                       partitions=self.partitions)
            setattr(self, short, topic)

    async def send_work(self, topic: faust.TopicT, works: list, key: Callable[[object], str]) -> None:
        """Send `works` as WorkBatch envelopes, one per partition of `key` (keeps per-key order)."""
        for partition, group in group_by_partition(works, key, self.partitions).items():
            await topic.send(value=records.WorkBatch(items=group), partition=partition)

    async def send_usage(self, events: list) -> None:
        if events:
            await self.usage.send(value=records.UsageBatch(events=events))
