"""The Faust side of the topics: one handle per registry entry (what the Faust agents read), the dead-letter
behaviour of those handles, and the L1 table partitioned like the stage topics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import faust
from faust.exceptions import ValueDecodeError

from schemas import records
from schemas.topics import TOPICS
from streams.core.deadletter import forged, undecodable
from streams.core.outbox import Delivers, Outbox
from streams.runtime.partitioning import partition_for
from streams.security import signing

VALUE_TYPES = {
    "distilled": records.WorkBatch,
    "score": records.WorkBatch,
    "scored": records.WorkBatch,
    "usage": records.UsageBatch,
    "decisions": records.Decision,
    "rejected": records.Rejection,
    "control": records.Control,
    "alerts": records.Alert,
    "review": records.Decision,
    "shadow": records.WorkBatch,
    "verdicts": records.Verdict,
}


class Forged(ValueDecodeError):
    """A message on a signed topic (streams.security.signing) that Jev did not write."""


class DeadLetterTopic(faust.Topic):
    """A topic whose undecodable or malformed messages go to the rejected topic instead of crashing the agent
    (Faust's default throws the decode error into the agent, which crashes and restarts it). Records decode
    eagerly (schemas.records.Record.from_data), so a malformed nested record is a decode error too. On a signed
    topic a message Jev did not write is refused before it decodes: counted in jev_forged_records_total,
    dead-lettered as forged_record, never handed to the agent."""

    def _compile_decode(self) -> None:
        super()._compile_decode()
        decode = self.decode

        async def checked(message, *, propagate: bool = False):
            reason = signing.keyring().problem(message.topic, message.value, message.headers)
            if not reason:
                return await decode(message, propagate=propagate)
            if propagate:  # the conductor's path: it acks the message and calls on_value_decode_error
                raise Forged(reason)
            await self.on_value_decode_error(Forged(reason), message)

        self.decode = checked  # type: ignore[method-assign]  # this topic's decode, wrapped once compiled

    def __init__(self, *args, sender: Delivers, **kwargs):
        super().__init__(*args, **kwargs)
        self.sender = sender  # where the dead letters go: the app's one Sender

    def _clone_args(self) -> Mapping:  # a Faust agent iterates a clone of its topic: it keeps the sender
        return {**super()._clone_args(), "sender": self.sender}

    async def on_value_decode_error(self, exc: Exception, message) -> None:
        if isinstance(exc, Forged):
            signing.refuse(message.topic, str(exc), f"partition {message.partition} offset {message.offset}")
            rejection = forged(message, str(exc))
        else:
            rejection = undecodable(message, exc)
        await self.sender.deliver(Outbox(dead_letters=[rejection]))

    on_key_decode_error = on_value_decode_error


class KeyPartitionedTable(faust.Table):
    """A table whose changelog partition is its key's partition on the stage topics (partition_for), not the
    current event's: stages can write it from micro-batches (stream.take, where no single event is current),
    and it stays co-partitioned with the topics they key by the same value."""

    def partition_for_key(self, key) -> int:
        return partition_for(key, self.partitions or self.app.conf.topic_partitions)


@dataclass
class Topics:
    """One faust topic per registry entry; `requests` is raw bytes so bad input reaches our decoder. Every signed
    topic is a DeadLetterTopic (raw bytes where it has no record type), so its signatures are checked."""

    app: faust.App
    partitions: int
    sender: Delivers

    def __post_init__(self):
        for short, spec in TOPICS.items():
            if short in VALUE_TYPES:
                topic = DeadLetterTopic(
                    self.app,
                    sender=self.sender,
                    topics=[spec.name],
                    value_type=VALUE_TYPES[short],
                    key_type=str,
                    partitions=self.partitions,
                )
            elif spec.name in signing.SIGNED:
                topic = DeadLetterTopic(
                    self.app,
                    sender=self.sender,
                    topics=[spec.name],
                    value_serializer="raw",
                    key_serializer="raw",
                    partitions=self.partitions,
                )
            else:
                topic = self.app.topic(
                    spec.name, value_serializer="raw", key_serializer="raw", partitions=self.partitions
                )
            setattr(self, short, topic)

    def __getattr__(self, short: str) -> faust.TopicT:  # only for a name __post_init__ did not set
        raise AttributeError(f"no topic {short!r}: the topics are schemas/topics.py's registry entries")
