-- usage_by_business_day had no tenant column, so a tenant-scoped report could not be limited to its own rows
-- (workers/analytics/tenancy.py filters every table that has one). The column joins the sorting key, so rows
-- of two tenants never merge into one; rows aggregated before this migration keep tenant '' and are visible
-- to admin queries only.
ALTER TABLE usage_by_business_day
    ADD COLUMN IF NOT EXISTS tenant LowCardinality(String) AFTER day,
    MODIFY ORDER BY (day, business_line, business_event, service, tenant);

DROP VIEW IF EXISTS usage_by_business_day_mv;

CREATE MATERIALIZED VIEW IF NOT EXISTS usage_by_business_day_mv TO usage_by_business_day AS
SELECT toDate(ts) AS day, tenant, business_line, business_event, service, uniqState(request_id) AS requests,
       sum(input_tokens) AS input_tokens, sum(output_tokens) AS output_tokens,
       sum(nominal_tokens) AS nominal_tokens, sum(cost) AS cost
FROM usage_events
GROUP BY day, tenant, business_line, business_event, service
