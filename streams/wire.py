"""Topic handles and partition-grouped sends shared by every stage."""
from __future__ import annotations

import functools
import time
import typing
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

import faust
from faust.exceptions import ValueDecodeError

from schemas import records
from schemas.topics import TOPICS, name

VALUE_TYPES = {"admitted": records.WorkBatch, "distilled": records.WorkBatch, "score": records.WorkBatch,
               "scored": records.WorkBatch, "usage": records.UsageBatch, "decisions": records.Decision,
               "rejected": records.Rejection, "control": records.Control, "alerts": records.Alert,
               "review": records.Decision}


DEAD_LETTER_ORIGINAL_MAX = 65_536  # bytes of a poison message kept in its dead letter (bounded, fits any broker)


def _holds_records(tp) -> bool:
    return (isinstance(tp, type) and issubclass(tp, faust.Record)) or any(map(_holds_records, typing.get_args(tp)))


@functools.lru_cache(maxsize=None)
def _record_fields(record: type) -> tuple[str, ...]:
    """The fields of `record` that hold records (directly, in a list or optional): the ones Faust converts lazily."""
    return tuple(field for field, tp in record._options.fields.items() if _holds_records(tp))


def _touch(value) -> None:
    """Faust converts nested record fields lazily, on first access; convert them all now so a malformed one
    raises here, in decoding, instead of later inside an agent."""
    if isinstance(value, faust.Record):
        for field in _record_fields(type(value)):
            _touch(getattr(value, field))
    elif isinstance(value, list):
        for item in value:
            _touch(item)


def well_formed(value) -> bool:
    """The envelope shapes the stage agents iterate over, every nested record converted."""
    try:
        _touch(value)
        if isinstance(value, records.WorkBatch):
            return isinstance(value.items, list) and all(
                isinstance(w, records.Work) and isinstance(w.request, records.Request) for w in value.items)
        if isinstance(value, records.UsageBatch):
            return isinstance(value.events, list) and all(isinstance(e, records.UsageEvent) for e in value.events)
        return isinstance(value, faust.Record)
    except Exception:
        return False


class DeadLetterTopic(faust.Topic):
    """A topic whose undecodable or malformed messages go to the rejected topic instead of crashing the agent
    (Faust's default throws the decode error into the agent, which crashes and restarts it)."""

    def _compile_decode(self) -> None:
        super()._compile_decode()
        decode = self.decode

        async def checked(message, *, propagate: bool = False):
            event = await decode(message, propagate=propagate)
            if event is not None and not well_formed(event.value):
                exc = ValueDecodeError(f"{type(event.value).__name__} has fields of the wrong type")
                if propagate:
                    raise exc
                await self.on_value_decode_error(exc, message)
                return None
            return event

        self.decode = checked

    async def on_value_decode_error(self, exc: Exception, message) -> None:
        raw = message.value or b""
        await self.app.send(name("rejected"), key=None, value=records.Rejection(
            reason="bad_internal_message", detail=f"{message.topic}[{message.partition}]@{message.offset}: "
                                                  f"{str(exc)[:500]}", stage=message.topic,
            original=raw[:DEAD_LETTER_ORIGINAL_MAX].decode("latin-1"), ts=time.time()))

    on_key_decode_error = on_value_decode_error

    async def send(self, *, value=None, **kwargs):
        """A dead letter keeps at most DEAD_LETTER_ORIGINAL_MAX characters of its original: a 10 MB poison
        request must not make its own Rejection too large for the broker (which crashes the sending agent)."""
        if isinstance(value, records.Rejection) and len(value.original) > DEAD_LETTER_ORIGINAL_MAX:
            value = value.derive(original=value.original[:DEAD_LETTER_ORIGINAL_MAX],
                                 detail=f"{value.detail} (original truncated from {len(value.original):,} chars)")
        return await super().send(value=value, **kwargs)


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
                topic = DeadLetterTopic(self.app, topics=[spec.name], value_type=VALUE_TYPES[short],
                                        key_type=str, partitions=self.partitions)
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
