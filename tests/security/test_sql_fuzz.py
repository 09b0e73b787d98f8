"""Hypothesis fuzzing of the SQL endpoint's tenant path: hostile queries composed from the probes that broke a
filter-based scope (PREWHERE that parses another tenant's row into an error, throwIf as an oracle, OR 1 = 1,
subqueries, UNION, CTEs, every usage table), run as tenant t0 through the same path as `jev sql --tenant` and the
owner's endpoint. Whatever runs or fails, no value of tenant t1's rows comes back, in rows or in errors."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.runtime.usage_sink import UsageSink
from workers.analytics import sample, sandbox

A, B = "t0", "t1"
TABLES = {
    "usage_events": "request_id",
    "usage_by_request": "request_id",
    "usage_by_session_hour": "session_id",
    "usage_by_stack_hour": "stack",
    "usage_by_business_day": "business_event",
}
PREDICATES = [
    "tenant = '{b}'",
    "tenant != '{a}'",
    "1 = 1",
    "tenant = '{b}' OR 1 = 1",
    "if(tenant = '{b}', toInt32(concat('LEAK|', tenant, '|', {col})), 0) = 0",
    "throwIf(tenant = '{b}' AND length({col}) >= {n}, 'X') = 0",
    "{col} IN (SELECT {col} FROM {table} WHERE tenant = '{b}')",
]
SHAPES = [
    "SELECT tenant, {col} FROM {table} {clause} {pred}",
    "SELECT count(), groupArray({col}) FROM {table} {clause} {pred}",
    "SELECT * FROM (SELECT tenant, {col} FROM {table} {clause} {pred}) LIMIT 50",
    "WITH x AS (SELECT tenant, {col} FROM {table} {clause} {pred}) SELECT * FROM x",
    "SELECT tenant, {col} FROM {table} {clause} {pred} UNION ALL SELECT tenant, {col} FROM {table}",
    "SELECT (SELECT groupArray({col}) FROM {table} {clause} {pred})",
]


@pytest.fixture(scope="module")
def victim(clickhouse_session):
    """Two tenants' rows, and every string of t1's rows that t0 must never see."""
    from infra.clickhouse import truncate_usage

    truncate_usage(clickhouse_session)
    UsageSink(clickhouse_session).insert(sample.usage_events(60, time.time() - 3600, span_s=3600))
    secret = set()
    for table, col in TABLES.items():
        secret |= {
            r[0]
            for r in clickhouse_session.query(
                f"SELECT DISTINCT {col} FROM {table} WHERE tenant = '{B}' AND {col} NOT IN "
                f"(SELECT {col} FROM {table} WHERE tenant = '{A}')"
            ).result_rows
        }
    return clickhouse_session, {s for s in secret if s}


def flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat(v)]
    return [value]


@hsettings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    table=st.sampled_from(sorted(TABLES)),
    shape=st.sampled_from(SHAPES),
    pred=st.sampled_from(PREDICATES),
    clause=st.sampled_from(["WHERE", "PREWHERE"]),
    n=st.integers(0, 40),
    upper=st.booleans(),
)
def test_no_query_a_tenant_can_write_returns_another_tenants_values(victim, table, shape, pred, clause, n, upper):
    client, secret = victim
    col = TABLES[table]
    sql = shape.format(col=col, table=table, clause=clause, pred=pred.format(a=A, b=B, col=col, n=n, table=table))
    sql = sql.replace("SELECT", "select") if upper else sql
    try:
        result = sandbox.run(client, "query", {"sql": sql}, A, sandbox.Limits(time_s=10))
    except (sandbox.QueryFailed, ValueError) as failed:
        message = str(failed)
        assert "LEAK" not in message, (sql, message)
        assert not any(s in message for s in secret if len(s) > 3), (sql, message)
        return
    values = {str(v) for row in result["rows"] for v in flat(row)}
    assert not values & secret, (sql, values & secret)
    assert B not in values and not any(v.startswith(f"{B};") for v in values), sql
