-- Shadow work (usage rows of stage 'shadow': the naive decisions that measure each saving's agreement) is
-- the price of a measurement, never serving spend: the request, session and business aggregates leave it
-- out. usage_by_stack_hour keeps it, as its own stage frame, so flame graphs show what measuring costs.
DROP VIEW IF EXISTS usage_by_request_mv;

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
WHERE stage != 'shadow'
GROUP BY tenant, service, decision_type, request_key;

DROP VIEW IF EXISTS usage_by_session_hour_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_session_hour_mv TO usage_by_session_hour AS
SELECT tenant, session_id, toStartOfHour(ts) AS hour, any(user_id) AS user_id, uniqState(request_id) AS requests,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost
FROM usage_events
WHERE stage != 'shadow'
GROUP BY tenant, session_id, hour;

DROP VIEW IF EXISTS usage_by_business_day_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_business_day_mv TO usage_by_business_day AS
SELECT toDate(ts) AS day, tenant, business_line, business_event, service, uniqState(request_id) AS requests,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost
FROM usage_events
WHERE stage != 'shadow'
GROUP BY day, tenant, business_line, business_event, service;
