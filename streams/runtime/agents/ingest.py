"""ingest: the requests topic through the ingest stage (streams/ingest/stage.py), read in micro-batches by a
BatchConsumer (not a Faust agent: Faust's per-message cost was the largest single cost of a cache hit), each
batch's Outbox delivered by the one Sender before the batch is committed."""

from __future__ import annotations

import faust

from streams.core.outbox import Delivers
from streams.ingest.stage import Ingest
from streams.runtime.consumer import BatchConsumer, serve
from streams.runtime.seen_log import RequestsSeenLog
from streams.runtime.topics import Topics
from streams.security import tenancy
from streams.settings import Settings


def register(
    app: faust.App, topics: Topics, settings: Settings, ingest: Ingest, sender: Delivers, seen: RequestsSeenLog
) -> BatchConsumer:
    """`seen` is the requests-seen log of ingest's idempotency state, which the agents that decide wait on too."""
    tenancy.announce(settings)  # a first deployment's defaults let any producer speak for any tenant: said at start

    @app.task
    async def follow_requests_seen():
        await seen.follow()

    def admit(messages):
        """The batch through ingest, at this process's share of the tenant rates (streams.ingest.fairness)."""
        ingest.limiter.hold(*held_partitions(consumer))
        return ingest(messages)

    consumer = BatchConsumer(
        settings.bootstrap,
        topics.requests.get_topic_name(),
        settings.ingest_group,
        admit,
        settings.stage_batch_max,
        settings.stage_batch_wait_ms,
        sender=sender,
        depth=2,
        before=seen.loaded,
        on_restart=lambda partition: ingest.requests.orphan_undecided(),
    )
    return serve(app, consumer)


def held_partitions(consumer: BatchConsumer) -> tuple[int, int]:
    """(partitions of its topic the consumer holds now, partitions of the topic): plain reads of the aiokafka
    consumer's assignment and metadata, which it keeps on its own loop; (0, 0) before it has started."""
    kafka = consumer.consumer
    if kafka is None:
        return 0, 0
    return len(kafka.assignment()), len(kafka.partitions_for_topic(consumer.topic) or ())
