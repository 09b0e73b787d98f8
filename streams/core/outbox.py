"""What a stage wants sent for one micro-batch. Stages return an Outbox instead of sending: the runtime's one
Sender (streams/runtime/sender.py) delivers it, and only then is the input committed, so a stage is a function of its
input that tests read directly."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Protocol

from schemas.records import Alert, Chunk, Decision, Rejection, UsageEvent, Work


@dataclass
class Outbox:
    decisions: list[tuple[Decision, dict[str, str]]] = field(default_factory=list)  # with their headers
    review: list[Decision] = field(default_factory=list)  # flagged decisions, held for a person
    usage: list[UsageEvent] = field(default_factory=list)
    work: dict[str, list[Work]] = field(default_factory=dict)  # internal topic short name → works, by cache key
    dead_letters: list[Rejection] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    records: list[tuple[str, bytes | None, bytes]] = field(default_factory=list)  # (topic short name, key, value)
    placed: list[tuple[str, int | None, bytes]] = field(default_factory=list)  # (topic short name, partition, value)
    chunks: list[Chunk] = field(default_factory=list)  # of streamed answers, in order; acknowledged before the rest
    # (reply kind, tenant, key, value) for a tenant's own reply topic (streams.core.tenants.reply_topic), where
    # the record carries no tenant the Sender could route it by (decisions, chunks, review and dead letters do)
    replies: list[tuple[str, str, bytes | None, bytes]] = field(default_factory=list)

    def send_work(self, topic: str, works: list[Work]) -> Outbox:
        if works:
            self.work.setdefault(topic, []).extend(works)
        return self

    def extend(self, other: Outbox) -> Outbox:
        """`other`'s records after this one's."""
        for f in fields(self):
            if f.name == "work":
                for topic, works in other.work.items():
                    self.send_work(topic, works)
            else:
                getattr(self, f.name).extend(getattr(other, f.name))
        return self

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))


class Delivers(Protocol):
    """What the stages hand their Outbox to: the runtime's Sender, or a test's capture of what would be sent."""

    async def deliver(self, outbox: Outbox) -> None: ...
