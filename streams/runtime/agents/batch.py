"""batch: the batch topic's members through the batch stage (streams/batch/stage.py) in windows, and each merged
call through its split, each read by a BatchConsumer (no table: no Faust agent needed), each Outbox delivered by the
one Sender before its messages are committed."""

from __future__ import annotations

import faust

from schemas.batch import MergedCall
from schemas.topics import name
from streams.batch.stage import BatchStage
from streams.budgets.book import BudgetBook
from streams.core.deadletter import forged, undecodable
from streams.core.outbox import Delivers, Outbox
from streams.runtime.consumer import BatchConsumer, serve
from streams.security import signing
from streams.settings import Settings


def register(app: faust.App, settings: Settings, sender: Delivers, book: BudgetBook | None = None) -> BatchStage:
    """`book`: the process's budgets, which members reserve their quota against."""
    stage = BatchStage(settings, book)

    async def aggregate(messages) -> Outbox:
        return await stage.aggregate([(m.value, tuple(m.headers or ())) for m in messages])

    async def split(messages) -> Outbox:  # one merged call per message: each is a model call already
        (message,) = messages
        if reason := signing.check(message):  # batch_merged is internal: only Jev's processes write it
            return Outbox(dead_letters=[forged(message, reason)])
        try:
            call = MergedCall.loads(message.value)
        except (ValueError, TypeError) as exc:  # dead-lettered, never read again
            return Outbox(dead_letters=[undecodable(message, exc)])
        return await stage.split(call)

    for topic, group, handle, max_records, linger_ms in (
        ("batch", settings.batch_group, aggregate, settings.batch_window_max, settings.batch_window_ms),
        ("batch_merged", settings.batch_merged_group, split, 1, 0),
    ):
        consumer = BatchConsumer(
            settings.bootstrap,
            name(topic),
            group,
            handle,
            max_records,
            wait_ms=100,
            linger_ms=linger_ms,
            sender=sender,
        )
        serve(app, consumer)
    return stage
