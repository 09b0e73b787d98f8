-- The four levels as materialized views fed by every insert into usage_events. The sink inserts each
-- event once, so the aggregates are exact; read them with GROUP BY (parts merge lazily).

-- request level: tokens by stage, cost, latency, the tier that answered (the postprocess event's outcome).
-- Keyed by a 64-bit hash of request_id: grouping millions of requests by an integer is several times faster.
CREATE TABLE IF NOT EXISTS usage_by_request
(
    tenant LowCardinality(String),
    service LowCardinality(String),
    decision_type LowCardinality(String),
    request_key UInt64,
    request_id SimpleAggregateFunction(any, String),
    business_line SimpleAggregateFunction(any, LowCardinality(String)),
    business_event SimpleAggregateFunction(any, LowCardinality(String)),
    session_id SimpleAggregateFunction(any, String),
    user_id SimpleAggregateFunction(any, String),
    first_ts SimpleAggregateFunction(min, DateTime64(3)),
    events SimpleAggregateFunction(sum, UInt64),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    cache_read_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    nominal_tokens SimpleAggregateFunction(sum, UInt64),
    cost SimpleAggregateFunction(sum, Float64),
    latency_ms SimpleAggregateFunction(max, Float32),
    tier SimpleAggregateFunction(max, String),
    tokens_by_stage SimpleAggregateFunction(sumMap, Map(String, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(first_ts)
ORDER BY (tenant, service, decision_type, request_key);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_request_mv TO usage_by_request AS
SELECT tenant, service, decision_type, cityHash64(usage_events.request_id) AS request_key,
       any(usage_events.request_id) AS request_id,
       any(business_line) AS business_line,
       any(business_event) AS business_event, any(session_id) AS session_id, any(user_id) AS user_id,
       min(ts) AS first_ts, count() AS events, sum(input_tokens) AS input_tokens,
       sum(cache_read_tokens) AS cache_read_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost, max(latency_ms) AS latency_ms,
       max(if(stage = 'postprocess' AND section = '', toString(outcome), '')) AS tier,
       sumMap(map(toString(stage), toUInt64(usage_events.input_tokens + usage_events.output_tokens))) AS tokens_by_stage
FROM usage_events
GROUP BY tenant, service, decision_type, request_key;

-- session level: per user/session and hour, summed over the last 24 hours at query time
CREATE TABLE IF NOT EXISTS usage_by_session_hour
(
    tenant LowCardinality(String),
    session_id String,
    hour DateTime,
    user_id SimpleAggregateFunction(any, String),
    requests AggregateFunction(uniq, String),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    nominal_tokens SimpleAggregateFunction(sum, UInt64),
    cost SimpleAggregateFunction(sum, Float64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(hour)
ORDER BY (tenant, session_id, hour);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_session_hour_mv TO usage_by_session_hour AS
SELECT tenant, session_id, toStartOfHour(ts) AS hour, any(user_id) AS user_id, uniqState(request_id) AS requests,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost
FROM usage_events
GROUP BY tenant, session_id, hour;

-- service level and flame graphs: per hour and frame (service, decision type, stage, section, model, outcome)
CREATE TABLE IF NOT EXISTS usage_by_stack_hour
(
    hour DateTime,
    tenant LowCardinality(String),
    service LowCardinality(String),
    decision_type LowCardinality(String),
    stage LowCardinality(String),
    section LowCardinality(String),
    model LowCardinality(String),
    outcome LowCardinality(String),
    stack SimpleAggregateFunction(any, String),
    events SimpleAggregateFunction(sum, UInt64),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    cache_read_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    nominal_tokens SimpleAggregateFunction(sum, UInt64),
    cost SimpleAggregateFunction(sum, Float64),
    latency_ms SimpleAggregateFunction(sum, Float64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(hour)
ORDER BY (hour, tenant, service, decision_type, stage, section, model, outcome);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_stack_hour_mv TO usage_by_stack_hour AS
SELECT toStartOfHour(ts) AS hour, tenant, service, decision_type, stage, section, model, outcome,
       any(stack) AS stack, count() AS events, sum(input_tokens) AS input_tokens,
       sum(cache_read_tokens) AS cache_read_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost, sum(latency_ms) AS latency_ms
FROM usage_events
GROUP BY hour, tenant, service, decision_type, stage, section, model, outcome;

-- business level: tokens and cost per business event (one business event per request) per day
CREATE TABLE IF NOT EXISTS usage_by_business_day
(
    day Date,
    business_line LowCardinality(String),
    business_event LowCardinality(String),
    service LowCardinality(String),
    requests AggregateFunction(uniq, String),
    input_tokens SimpleAggregateFunction(sum, UInt64),
    output_tokens SimpleAggregateFunction(sum, UInt64),
    nominal_tokens SimpleAggregateFunction(sum, UInt64),
    cost SimpleAggregateFunction(sum, Float64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(day)
ORDER BY (day, business_line, business_event, service);

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_business_day_mv TO usage_by_business_day AS
SELECT toDate(ts) AS day, business_line, business_event, service, uniqState(request_id) AS requests,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost
FROM usage_events
GROUP BY day, business_line, business_event, service
