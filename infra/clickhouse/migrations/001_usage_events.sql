-- The metering spine: one row per stage per request. Redelivered events carry the same event_id;
-- ReplacingMergeTree collapses them, and queries that must be exact read with FINAL.
CREATE TABLE IF NOT EXISTS usage_events
(
    event_id String,
    request_id String,
    ts DateTime64(3),
    tenant LowCardinality(String),
    service LowCardinality(String),
    business_line LowCardinality(String),
    session_id String,
    user_id String,
    decision_type LowCardinality(String),
    stage LowCardinality(String),
    stack String,
    model LowCardinality(String),
    input_tokens UInt32,
    cache_read_tokens UInt32,
    output_tokens UInt32,
    nominal_tokens UInt64,
    candidates UInt32,
    beam UInt32,
    iteration UInt16,
    latency_ms Float32,
    cost Float64,
    outcome LowCardinality(String),
    business_event String
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, service, decision_type, event_id)
