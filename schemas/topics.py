"""The topic registry: every topic Jev uses, declared once."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TopicSpec:
    name: str
    key: str
    carries: str
    external: bool = False
    config: tuple[tuple[str, str], ...] = ()  # Kafka topic configs create_topics sets


# Latest value per key is all a reader needs: Kafka keeps the newest record per key and drops the rest.
COMPACTED = (("cleanup.policy", "compact"),)
# The cache-state topic is keyed by the writing process (one key per process, each message a batch of L2 fills,
# verdicts and L3 observations that add up), so compaction would keep one batch per process and drop the rest of
# the cache: its log is bounded by age instead, losing to new processes only entries older than a week.
WEEK = (("cleanup.policy", "delete"), ("retention.ms", str(7 * 24 * 3600 * 1000)))


TOPICS = {
    spec.name.split(".")[1]: spec
    for spec in (
        TopicSpec("jev.requests.v1", "session_id", "Request (one per message, from upstream)", external=True),
        TopicSpec("jev.distilled.v1", "cache_key", "WorkBatch after ingest and distill"),
        TopicSpec("jev.score.v1", "cache_key", "WorkBatch of cache misses for the scoring workers"),
        TopicSpec("jev.scored.v1", "cache_key", "WorkBatch decided by the scoring workers"),
        TopicSpec("jev.decisions.v1", "request_id", "Decision (one per message, all tenants)", external=True),
        TopicSpec("jev.chunks.v1", "request_id", "Chunk of a streamed answer (all tenants)", external=True),
        TopicSpec("jev.usage.v1", "request_id", "UsageBatch"),
        TopicSpec("jev.rejected.v1", "request_id", "Rejection (dead letters with originals: operators)", external=True),
        TopicSpec("jev.control.v1", "kind:key", "Control (latest value per key)", external=True, config=COMPACTED),
        TopicSpec("jev.alerts.v1", "scope", "Alert", external=True),
        TopicSpec("jev.batch.v1", "job", "batch job members", external=True),
        TopicSpec("jev.batch_merged.v1", "job", "MergedCall: generated merged prompt of several batch members"),
        TopicSpec("jev.batch_results.v1", "job", "BatchResult (one per batch member, all tenants)", external=True),
        TopicSpec("jev.review.v1", "request_id", "Decision flagged for human review (all tenants)", external=True),
        TopicSpec("jev.budget.v1", "key", "BudgetEvent: a hard budget's lease log, owned per partition"),
        TopicSpec("jev.leases.v1", "holder", "BudgetEvent grants, to the stage process that asked"),
        TopicSpec(
            "jev.shadow.v1", "cache_key", "WorkBatch of naive twins of sampled requests, for the scoring workers"
        ),
        TopicSpec(
            "jev.verdicts.v1", "request_id", "Verdict: a sampled request's served vs naive decision", external=True
        ),
        TopicSpec(
            "jev.cache_state.v1", "origin", "cache-state records: L2 fills and verdicts, L3 follow-ups", config=WEEK
        ),
        TopicSpec(
            "jev.requests_seen.v1",
            "<len>:tenant/<len>:request_id",
            "idempotency log: admitted requests' content fingerprints and first decisions",
            config=COMPACTED,
        ),
    )
}


# Replies also go to topics of their own tenant, jev.tenant.<slug>.<kind>.v1, created on first use: not listed
# here, named by streams.core.tenants.reply_topic (docs/operations.md, replies per tenant).


def name(short: str) -> str:
    return TOPICS[short].name
