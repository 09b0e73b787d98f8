-- Shadow agreement: one verdict per sampled request (its served decision against the naive one: full
-- context, no cache, top tier only), naming every saving mechanism that acted on the served request.
-- ReplacingMergeTree on request_id: a redelivered verdict collapses (read with FINAL).
CREATE TABLE IF NOT EXISTS shadow_verdicts
(
    request_id String,
    ts DateTime64(3),
    tenant LowCardinality(String),
    service LowCardinality(String),
    decision_type LowCardinality(String),
    kind LowCardinality(String),
    mechanisms Array(LowCardinality(String)),
    agreed Bool,
    kept Bool,
    similarity Float32,
    served_tier LowCardinality(String),
    naive_tier LowCardinality(String),
    served_action String,
    naive_action String,
    labelled Bool,
    served_correct Bool,
    naive_correct Bool,
    served_tokens UInt32,
    naive_tokens UInt32,
    nominal_tokens UInt64
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, decision_type, request_id);

-- The mechanism a usage row's saving belongs to (the names verdicts use; '' for rows that are no saving
-- mechanism: ingest, model calls, shared context, state cache, shadow work).
CREATE VIEW IF NOT EXISTS usage_savings_by_mechanism AS
SELECT toDate(ts) AS day, tenant, decision_type,
       multiIf(stage = 'distill' AND section IN ('dedup', 'domain', 'semantic', 'time'), concat('distill.', section),
               stage = 'cache', replaceOne(section, 'cache_', 'cache.'),
               stage = 'score' AND section IN ('rules', 'cascade', 'beam', 'hierarchy', 'shared_context'),
               section,
               stage = 'score' AND section = 'fallback', if(outcome = 'degraded', 'budget', 'breakers'),
               stage = 'postprocess' AND section = 'cleanup', 'cleanup', '') AS mechanism,
       toInt64(nominal_tokens) - toInt64(input_tokens + output_tokens) AS tokens_saved
FROM usage_events
WHERE stage != 'shadow';

-- Agreement wherever tokens are read: per mechanism, decision type, tenant and day, the tokens the mechanism
-- saved beside the verdicts on requests it acted on (agreement = agreed / verdicts; kept counts labelled
-- verdicts by accuracy: the served decision no worse than the naive one). 'all' is every verdict.
CREATE VIEW IF NOT EXISTS agreement_by_mechanism_day AS
SELECT day, tenant, decision_type, mechanism, sum(saved) AS tokens_saved, sum(verdict) AS verdicts,
       sum(agree) AS agreed, sum(keep) AS kept, sum(label) AS labelled,
       sum(served_right) AS served_correct, sum(naive_right) AS naive_correct,
       if(sum(verdict) > 0, sum(agree) / sum(verdict), NULL) AS agreement
FROM
(
    SELECT day, tenant, decision_type, mechanism, tokens_saved AS saved, 0 AS verdict, 0 AS agree, 0 AS keep,
           0 AS label, 0 AS served_right, 0 AS naive_right
    FROM usage_savings_by_mechanism WHERE mechanism != ''
    UNION ALL
    SELECT toDate(ts) AS day, tenant, decision_type, mechanism, 0 AS saved, 1 AS verdict,
           toUInt8(agreed) AS agree, toUInt8(kept) AS keep, toUInt8(labelled) AS label,
           toUInt8(served_correct) AS served_right, toUInt8(naive_correct) AS naive_right
    FROM shadow_verdicts FINAL ARRAY JOIN arrayConcat(['all'], mechanisms) AS mechanism
)
GROUP BY day, tenant, decision_type, mechanism;
