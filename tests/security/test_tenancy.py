"""Tenant isolation on every query surface: a tenant's SQL, report and flame graph read its own rows only,
whatever the query text tries (UNION, subqueries, SETTINGS, table functions, system tables), and the owner's
HTTP endpoints answer only a known bearer token, each token bound to a tenant or to every tenant."""
from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import pytest

from schemas.records import UsageEvent
from streams.usage.sink import UsageSink
from workers.analytics import flamegraph, report, sample, tenancy
from workers.analytics.owner import QueryServer, owner_file, run_query
from workers.cli import main

A, B = "t0", "t1"  # the tenants sample.usage_events writes (request i belongs to t{i % 2})
ODD = "o'brien\\ -- "  # a tenant name with quote, backslash and comment characters
NOW = dt.datetime.now(dt.timezone.utc)
WEEK = NOW - dt.timedelta(days=7)


@pytest.fixture
def two_tenants(usage_db):
    events = sample.usage_events(200, time.time() - 3 * 3600, span_s=3 * 3600)
    odd = [UsageEvent(**{**e.asdict(), "tenant": ODD, "stack": ODD + e.stack[len(e.tenant):],
                         "event_id": f"odd-{e.event_id}", "request_id": f"odd-{e.request_id}"}) for e in events[:30]]
    UsageSink(usage_db).insert(events + odd)
    return usage_db


def values(client, sql: str) -> set:
    return {row[0] for row in run_query(client, sql)["rows"]}


@pytest.mark.parametrize("sql", [
    "SELECT tenant FROM usage_events",
    "SELECT tenant FROM default.usage_events FINAL",
    "SELECT tenant FROM usage_events WHERE tenant = 't1' OR 1 = 1",
    "SELECT tenant FROM (SELECT * FROM usage_events WHERE tenant != 't0')",
    "WITH x AS (SELECT * FROM usage_events) SELECT tenant FROM x",
    "SELECT tenant FROM usage_by_request UNION ALL SELECT tenant FROM usage_by_session_hour",
    "SELECT tenant FROM usage_by_stack_hour UNION DISTINCT (SELECT tenant FROM usage_events ORDER BY tenant DESC)",
    "SELECT tenant FROM usage_events INTERSECT SELECT tenant FROM usage_by_business_day",
    "SELECT tenant FROM usage_events EXCEPT SELECT 'nobody'",
    "SELECT a.tenant FROM usage_events AS a JOIN usage_by_request AS b ON a.request_id = b.request_id",
    "SELECT tenant FROM usage_events WHERE request_id IN (SELECT request_id FROM usage_by_request WHERE tenant = 't1')"
    " OR 1 = 1",
    "SELECT tenant FROM usage_by_business_day",
])
def test_a_tenants_sql_sees_only_its_rows(two_tenants, sql):
    everyone = values(two_tenants, sql)
    assert B in everyone  # the same text run as admin reads the other tenant
    assert values(tenancy.scoped(two_tenants, A), sql) == everyone & {A}


def test_scalar_subqueries_and_aggregates_count_only_the_tenants_rows(two_tenants):
    admin = run_query(two_tenants, "SELECT countIf(tenant = 't0'), count() FROM usage_events")["rows"][0]
    scoped = tenancy.scoped(two_tenants, A)
    assert run_query(scoped, "SELECT count() FROM usage_events")["rows"] == [[admin[0]]]
    assert run_query(scoped, "SELECT (SELECT count() FROM usage_events WHERE tenant = 't1')")["rows"] == [[0]]
    assert admin[0] < admin[1]


@pytest.mark.parametrize("sql, why", [
    ("SELECT tenant FROM usage_events SETTINGS additional_table_filters = {}", "settings"),
    ("SELECT tenant FROM (SELECT * FROM usage_events SETTINGS additional_table_filters = {})", "settings"),
    ("SELECT tenant FROM usage_events UNION ALL SELECT tenant FROM usage_events SETTINGS readonly = 0", "settings"),
    ("SELECT * FROM system.tables", "database 'system'"),
    ("SELECT count() FROM `system`.`parts`", "database 'system'"),
    ("SELECT (SELECT count() FROM system.query_log)", "database 'system'"),
    ("SELECT * FROM information_schema.columns", "database 'information_schema'"),
    ("SELECT * FROM INFORMATION_SCHEMA.TABLES", "database 'INFORMATION_SCHEMA'"),
    ("SELECT event_id FROM usage_event_ids", "no tenant column"),
    ("SELECT tenant FROM usage_events WHERE event_id IN usage_event_ids", "no tenant column"),
    ("SELECT name FROM schema_migrations", "no tenant column"),
    ("SELECT tenant FROM usage_by_request_mv", "no tenant column"),
    ("SELECT * FROM numbers(10)", "numbers()"),
    ("SELECT tenant FROM merge('default', '^usage_e')", "merge()"),
    ("SELECT tenant FROM remote('127.0.0.1', default.usage_events)", "remote()"),
    ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "file()"),
    ("SELECT file('/etc/passwd')", "file()"),
    ("SELECT dictGet('d', 'x', toUInt64(1))", "dictGet()"),
    ("SELECT joinGet('j', 'x', 1)", "joinGet()"),
    ("SELECT * FROM (EXPLAIN AST SELECT 1)", "viewExplain()"),
    ("SELECT tenant FROM usage_events FORMAT JSON", "one SELECT"),
    ("SHOW TABLES", "one SELECT"),
    ("DESCRIBE TABLE system.users", "one SELECT"),
    ("EXISTS TABLE usage_event_ids", "one SELECT"),
    ("SELECT tenant FROM usage_events INTO OUTFILE '/tmp/jev-leak.csv'", "OUTFILE"),
    ("SELECT 1; SELECT tenant FROM usage_events", "one read-only statement"),
    ("SET additional_table_filters = {}", "one read-only statement"),
])
def test_a_tenants_sql_that_could_read_outside_its_rows_is_refused(two_tenants, sql, why):
    with pytest.raises(ValueError) as refused:
        run_query(tenancy.scoped(two_tenants, A), sql)
    assert why in str(refused.value)
    assert not Path("/tmp/jev-leak.csv").exists()


def test_tenant_names_cannot_break_out_of_the_filter(two_tenants):
    odd = tenancy.scoped(two_tenants, ODD)
    assert values(odd, "SELECT tenant FROM usage_events") == {ODD}
    assert values(odd, "SELECT count() FROM usage_events") == {30}
    assert values(tenancy.scoped(two_tenants, "t0' OR 1 = 1 OR tenant = '"), "SELECT count() FROM usage_events") == {0}


def test_a_tenants_report_holds_only_its_rows(two_tenants):
    data = report.collect(tenancy.scoped(two_tenants, A), WEEK, NOW, "service")
    tokens, requests = two_tenants.query(
        "SELECT sum(input_tokens + output_tokens), uniqExact(request_id) FROM usage_events WHERE tenant = 't0'"
    ).result_rows[0]
    assert data["totals"]["tokens"] == tokens == data["request"]["tokens"]
    assert data["totals"]["requests"] == requests == sum(r["requests"] for r in data["service"]["overall"])
    assert sum(r["events"] for r in data["business"]["overall"]) == requests
    assert {r["tenant"] for r in data["session"]["top"]} == {A}
    assert data["totals"]["tokens"] < report.collect(two_tenants, WEEK, NOW, "service")["totals"]["tokens"]


def test_a_tenants_flame_graph_holds_only_its_rows(two_tenants):
    stacks = flamegraph.folded(tenancy.scoped(two_tenants, A), WEEK)  # no tenant argument: the scope alone
    everyone = flamegraph.folded(two_tenants, WEEK)
    assert stacks and {s.split(";")[0] for s in stacks} == {A}
    assert {s.split(";")[0] for s in everyone} == {A, B, ODD}
    assert stacks == {s: w for s, w in everyone.items() if s.startswith(f"{A};")}


def test_cli_commands_take_a_tenant(two_tenants, clickhouse_dsn, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("JEV_CLICKHOUSE_DSN", clickhouse_dsn)
    assert main(["sql", "--tenant", A, "--json", "SELECT tenant, count() AS n FROM usage_events GROUP BY tenant"]) == 0
    row, _ = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["tenant"] == A
    assert main(["sql", "--tenant", A, "SELECT count() FROM system.tables"]) == 2
    assert "database 'system'" in capsys.readouterr().err
    assert main(["report", "--tenant", A, "--json"]) == 0
    assert {r["tenant"] for r in orjson.loads(capsys.readouterr().out.splitlines()[-1])["session"]["top"]} == {A}
    assert main(["flamegraph", "--tenant", A, "--since", "24h", "-o", str(tmp_path / "f.svg")]) == 0
    svg = (tmp_path / "f.svg").read_text()
    assert f">{A}<" in svg and f">{B}<" not in svg


TOKENS = {"acme-token-0123456789abcdef": A, "ops-token-0123456789abcdef": tenancy.ADMIN}


def call(base: str, endpoint: str, body: dict, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(f"{base}/{endpoint}", data=orjson.dumps(body), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


@pytest.fixture
async def endpoints(two_tenants, clickhouse_dsn):
    async with QueryServer(two_tenants, clickhouse_dsn, TOKENS):
        owner = orjson.loads(owner_file(clickhouse_dsn).read_bytes())

        async def ask(endpoint: str, body: dict, token: str | None):
            return await asyncio.to_thread(call, owner["url"].rsplit("/", 1)[0], endpoint, body, token)

        yield ask, owner["token"]


BY_TENANT = {"sql": "SELECT tenant, count() FROM usage_events GROUP BY tenant ORDER BY tenant"}


async def test_endpoints_keep_a_tenant_token_to_its_tenant(endpoints, two_tenants):
    ask, _ = endpoints
    token = "acme-token-0123456789abcdef"
    code, body = await ask("query", BY_TENANT, token)
    assert code == 200 and [r[0] for r in body["rows"]] == [A]
    code, body = await ask("report", {"since": "7d"}, token)
    assert code == 200 and body["totals"]["tokens"] == two_tenants.query(
        "SELECT sum(input_tokens + output_tokens) FROM usage_events WHERE tenant = 't0'").result_rows[0][0]
    code, body = await ask("flamegraph", {"since": "24h"}, token)
    assert code == 200 and body["stacks"] and {s.split(";")[0] for s in body["stacks"]} == {A}
    for endpoint, request in (("query", {**BY_TENANT, "tenant": B}), ("report", {"tenant": B}),
                              ("flamegraph", {"tenant": B})):
        code, body = await ask(endpoint, request, token)
        assert code == 403 and body["error"] == "this token reads tenant 't0' only"
    code, body = await ask("query", {"sql": "SELECT * FROM usage_events SETTINGS additional_table_filters = {}"},
                           token)
    assert code == 400 and "settings" in body["error"]


async def test_endpoints_give_admin_tokens_every_tenant_or_the_one_asked(endpoints):
    ask, owner_token = endpoints
    for token in (owner_token, "ops-token-0123456789abcdef"):
        code, body = await ask("query", BY_TENANT, token)
        assert code == 200 and [r[0] for r in body["rows"]] == sorted([A, B, ODD])
        code, body = await ask("query", {**BY_TENANT, "tenant": B}, token)
        assert code == 200 and [r[0] for r in body["rows"]] == [B]


@pytest.mark.parametrize("token", [None, "", "wrong", "acme-token-0123456789abcde", "Basic acme"])
@pytest.mark.parametrize("endpoint", ["query", "report", "flamegraph"])
async def test_endpoints_refuse_a_missing_or_wrong_token(endpoints, token, endpoint):
    ask, _ = endpoints
    code, body = await ask(endpoint, BY_TENANT, token)
    assert code == 401 and body["error"].startswith("missing or wrong bearer token")
    assert "JEV_QUERY_TOKENS" in body["error"]


def write_tokens(tmp_path, content: bytes, mode: int = 0o600) -> str:
    path = tmp_path / "tokens.json"
    path.write_bytes(content)
    os.chmod(path, mode)
    return str(path)


def test_token_file_loads_and_refuses_unsafe_files(tmp_path):
    assert tenancy.load_tokens("") == {}
    assert tenancy.load_tokens(write_tokens(tmp_path, orjson.dumps(TOKENS))) == TOKENS
    for content, mode, message in [
        (orjson.dumps(TOKENS), 0o644, "chmod 600"),
        (b'{"short": "t0"}', 0o600, "shorter than 16"),
        (b"not json", 0o600, "not JSON"),
        (b'{"acme-token-0123456789abcdef": ""}', 0o600, "expected"),
    ]:
        with pytest.raises(SystemExit, match=message):
            tenancy.load_tokens(write_tokens(tmp_path, content, mode))
    with pytest.raises(SystemExit, match="no such file"):
        tenancy.load_tokens(str(tmp_path / "missing.json"))
