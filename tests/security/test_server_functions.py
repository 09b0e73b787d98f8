"""A tenant's SQL read version(), hostName() and filesystemAvailable(): the server's version, the machine's name
and its free disk. Its SQL may now call only aggregates and functions over the values it reads; anything else is
refused with an error that says what is allowed."""

from __future__ import annotations

import time

import pytest

from streams.runtime.usage_sink import UsageSink
from workers.analytics import sample, sandbox, tenancy

TENANTS = ("t0", "t1")  # the tenants sample.usage_events writes
SERVER = (
    "version()",
    "hostName()",
    "FQDN()",
    "filesystemAvailable()",
    "uptime()",
    "serverUUID()",
    "currentUser()",
    "getSetting('max_threads')",
    "timezone()",
    "hasColumnInTable('system', 'users', 'name')",
    "getOSKernelVersion()",
    "sleep(1)",
    "aiGenerate('hi')",
)
OWN = (
    "SELECT tenant, count() AS n, uniqExact(request_id) AS requests, countIf(stage = 'score') AS scored, "
    "sumIf(input_tokens, outcome != '') AS tokens, formatReadableSize(sum(output_tokens)) AS out, "
    "toStartOfHour(max(ts)) >= now() - INTERVAL 1 DAY AS recent, arrayMap(x -> x * 2, [count()])[1] AS doubled, "
    "CASE WHEN count() > 0 THEN 'some' ELSE 'none' END AS any_rows FROM usage_events GROUP BY tenant"
)


@pytest.fixture
def two_tenants(usage_db):
    UsageSink(usage_db).insert(sample.usage_events(80, time.time() - 3600, span_s=3600))
    return usage_db


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_tenants_query_cannot_read_the_server_but_reads_its_rows(two_tenants, tenant):
    with pytest.raises(sandbox.QueryFailed) as refused:
        sandbox.run(
            two_tenants,
            "query",
            {"sql": "SELECT version(), hostName(), filesystemAvailable()"},
            tenant,
            sandbox.Limits(),
        )
    assert "may not call version()" in str(refused.value) and "allowed are aggregates" in str(refused.value)
    answer = sandbox.run(two_tenants, "query", {"sql": OWN}, tenant, sandbox.Limits())
    expected = two_tenants.query(
        "SELECT count(), uniqExact(request_id), countIf(stage = 'score'), sumIf(input_tokens, outcome != '') "
        "FROM usage_events WHERE tenant = {t:String}",
        parameters={"t": tenant},
    ).result_rows[0]
    (row,) = answer["rows"]
    assert row[0] == tenant and tuple(row[1:5]) == expected and expected[0] > 0
    assert row[6:] == [True, 2 * expected[0], "some"]


@pytest.mark.parametrize("call", SERVER)
def test_the_gate_refuses_every_function_that_reads_the_server(two_tenants, call):
    with pytest.raises(tenancy.Refused) as refused:
        tenancy.check_query(two_tenants, f"SELECT tenant, {call} FROM usage_events")
    assert f"may not call {call.split('(')[0]}()" in str(refused.value) and "Arithmetic" in str(refused.value)
