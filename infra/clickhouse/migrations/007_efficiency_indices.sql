-- The efficiency indices per minute (seed 004's dashboard), fed by every insert into usage_events (with the
-- minute's actual and nominal tokens, so a short window's chart can be drawn by the minute):
--   TE token efficiency    effective_tokens / tokens (effective: not spent on a fallback or on repairing output)
--   CP cache penetration   model_decisions / decisions (decided by a model tier: no cache level or rule answered)
--   HR hybrid routing      1 - top_tier_decisions / decisions (answered below the fine/escalation model)
--   PE protocol expansion  prompt_bytes / compact_bytes (the prompt as rendered vs a compact encoding, at ingest)
-- L3 pre-answers (request ids with '~l3~') are no decisions: their tokens count, their tier does not.
-- MU (GPU memory) is no usage: it is the jev_gpu_memory_utilization gauge in Prometheus.
ALTER TABLE usage_events ADD COLUMN IF NOT EXISTS prompt_bytes UInt64 DEFAULT 0;

ALTER TABLE usage_events ADD COLUMN IF NOT EXISTS compact_bytes UInt64 DEFAULT 0;

CREATE TABLE IF NOT EXISTS indices_by_minute
(
    minute DateTime,
    tenant LowCardinality(String),
    service LowCardinality(String),
    decision_type LowCardinality(String),
    tokens SimpleAggregateFunction(sum, UInt64),
    nominal_tokens SimpleAggregateFunction(sum, UInt64),
    effective_tokens SimpleAggregateFunction(sum, UInt64),
    decisions SimpleAggregateFunction(sum, UInt64),
    model_decisions SimpleAggregateFunction(sum, UInt64),
    top_tier_decisions SimpleAggregateFunction(sum, UInt64),
    pre_answers SimpleAggregateFunction(sum, UInt64),
    prompt_bytes SimpleAggregateFunction(sum, UInt64),
    compact_bytes SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(minute)
ORDER BY (tenant, service, decision_type, minute);

INSERT INTO indices_by_minute
SELECT toStartOfMinute(ts) AS minute, tenant, service, decision_type,
       sum(input_tokens + output_tokens) AS tokens, sum(nominal_tokens) AS nominal_tokens,
       sumIf(input_tokens + output_tokens,
             outcome != 'fallback' AND NOT (stage = 'postprocess' AND section IN ('retry', 'cleanup'))) AS effective_tokens,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0) AS decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0
               AND outcome IN ('coarse', 'fine', 'llm', 'fallback')) AS model_decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0
               AND outcome IN ('fine', 'llm')) AS top_tier_decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') > 0) AS pre_answers,
       sum(prompt_bytes) AS prompt_bytes, sum(compact_bytes) AS compact_bytes
FROM usage_events
WHERE stage != 'shadow'  -- shadow work is not serving spend
GROUP BY minute, tenant, service, decision_type;

CREATE MATERIALIZED VIEW IF NOT EXISTS indices_by_minute_mv TO indices_by_minute AS
SELECT toStartOfMinute(ts) AS minute, tenant, service, decision_type,
       sum(input_tokens + output_tokens) AS tokens, sum(nominal_tokens) AS nominal_tokens,
       sumIf(input_tokens + output_tokens,
             outcome != 'fallback' AND NOT (stage = 'postprocess' AND section IN ('retry', 'cleanup'))) AS effective_tokens,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0) AS decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0
               AND outcome IN ('coarse', 'fine', 'llm', 'fallback')) AS model_decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') = 0
               AND outcome IN ('fine', 'llm')) AS top_tier_decisions,
       countIf(stage = 'postprocess' AND section = '' AND position(request_id, '~l3~') > 0) AS pre_answers,
       sum(prompt_bytes) AS prompt_bytes, sum(compact_bytes) AS compact_bytes
FROM usage_events
WHERE stage != 'shadow'  -- shadow work is not serving spend
GROUP BY minute, tenant, service, decision_type;

-- The indices since a moment, for analysts and Grafana: SELECT * FROM efficiency_indices(since = now() - 3600)
CREATE VIEW IF NOT EXISTS efficiency_indices AS
SELECT if(sum(tokens) = 0, NULL, sum(effective_tokens) / sum(tokens)) AS te,
       if(sum(decisions) = 0, NULL, sum(model_decisions) / sum(decisions)) AS cp,
       if(sum(decisions) = 0, NULL, 1 - sum(top_tier_decisions) / sum(decisions)) AS hr,
       if(sum(compact_bytes) = 0, NULL, sum(prompt_bytes) / sum(compact_bytes)) AS pe,
       sum(decisions) AS decided, sum(pre_answers) AS pre_answered, sum(tokens) AS tokens_spent
FROM indices_by_minute
WHERE minute >= toStartOfMinute(toDateTime({since:UInt32}));
