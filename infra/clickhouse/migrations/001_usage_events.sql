-- The metering spine: one row per stage per request, columns named as in OTel GenAI where one exists
-- (aliases below give the dotted OTel names). Exactly once: the usage sink drops events whose event_id is
-- already stored (usage_event_ids, migration 003), so plain sums are exact; ReplacingMergeTree on event_id is
-- the backstop when two sinks race during a rebalance (read with FINAL to be sure). The bloom filter index
-- serves look-ups of single events (WHERE event_id = ...).
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
    business_event LowCardinality(String),
    -- the mechanism inside a stage: the last frame of the stack when it follows the stage
    section LowCardinality(String) MATERIALIZED
        if(length(splitByChar(';', stack)) >= 2 AND splitByChar(';', stack)[-2] = stage, splitByChar(';', stack)[-1], ''),
    `gen_ai.usage.input_tokens` UInt32 ALIAS input_tokens,
    `gen_ai.usage.output_tokens` UInt32 ALIAS output_tokens,
    `gen_ai.usage.cache_read.input_tokens` UInt32 ALIAS cache_read_tokens,
    `gen_ai.request.model` String ALIAS model,
    `gen_ai.conversation.id` String ALIAS session_id,
    INDEX event_id_bloom event_id TYPE bloom_filter(0.001) GRANULARITY 1
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, service, decision_type, event_id)
