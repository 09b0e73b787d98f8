"""Tenant isolation on every query surface: a tenant's SQL, report, flame graph and alerts run in a sandbox
that holds only that tenant's rows, so whatever the query text tries (UNION, subqueries, PREWHERE that throws on
another tenant's row, throwIf as an oracle) it sees its own rows only and its errors carry no row data; no token
reads a file, a URL or a table outside Jev's; the owner's endpoints answer only a known bearer token, each token
bound to a tenant or to every tenant, at most JEV_QUERY_CONCURRENCY calls at a time, under the query limits."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request

import orjson
import pytest

from schemas.records import UsageEvent, Verdict
from streams.runtime.usage_sink import UsageSink
from streams.shadow.store import VerdictStore
from workers.analytics import sample, sandbox, tenancy
from workers.analytics.owner import QueryServer, owner_file
from workers.cli.main import main

A, B = "t0", "t1"  # the tenants sample.usage_events writes (request i belongs to t{i % 2})
ODD = "o'brien\\ -- "  # a tenant name with quote, backslash and comment characters
LIMITS = sandbox.Limits()


@pytest.fixture
def two_tenants(usage_db):
    events = sample.usage_events(200, time.time() - 3 * 3600, span_s=3 * 3600)
    odd = [
        UsageEvent(
            **{
                **e.asdict(),
                "tenant": ODD,
                "stack": ODD + e.stack[len(e.tenant) :],
                "event_id": f"odd-{e.event_id}",
                "request_id": f"odd-{e.request_id}",
            }
        )
        for e in events[:30]
    ]
    UsageSink(usage_db).insert(events + odd)
    return usage_db


def rows(client, sql: str, tenant: str | None = A, limits: sandbox.Limits = LIMITS) -> list:
    return sandbox.run(client, "query", {"sql": sql}, tenant, limits)["rows"]


def secrets_of(client, tenant: str) -> set[str]:
    """Strings of `tenant`'s rows that no other tenant may ever see."""
    found = client.query(
        "SELECT request_id, session_id, user_id FROM usage_events WHERE tenant = {t:String}", parameters={"t": tenant}
    ).result_rows
    return {value for row in found for value in row}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT tenant FROM usage_events",
        "SELECT tenant FROM default.usage_events FINAL WHERE tenant = 't1' OR 1 = 1",
        "WITH x AS (SELECT * FROM usage_events) SELECT tenant FROM x WHERE tenant != 't0'",
        "SELECT tenant FROM usage_by_request UNION ALL SELECT tenant FROM usage_by_session_hour",
        "SELECT a.tenant FROM usage_events AS a JOIN usage_by_request AS b ON a.request_id = b.request_id",
        "SELECT tenant FROM usage_by_business_day UNION ALL SELECT tenant FROM usage_by_stack_hour",
    ],
)
def test_a_tenants_sql_sees_only_its_rows(two_tenants, sql):
    everyone = {r[0] for r in rows(two_tenants, sql, tenant=None)}
    assert B in everyone  # the same text run as admin reads the other tenant
    assert {r[0] for r in rows(two_tenants, sql)} <= {A}


PREWHERE_PROBE = (
    "SELECT count() FROM {table} PREWHERE if(tenant='{victim}', toInt32(concat('LEAK|',tenant,'|',{columns})),0)=0"
)


@pytest.mark.parametrize(
    "table, columns",
    [
        ("usage_events", "request_id,'|',session_id,'|',user_id,'|',business_event"),
        ("usage_by_session_hour", "session_id,'|',user_id"),
    ],
)
def test_the_prewhere_probe_sees_no_other_tenants_row(two_tenants, table, columns):
    """The issue's probe: PREWHERE runs before any row filter, so a filter-based scope let it parse (and quote in
    its error) another tenant's row. In the sandbox that row does not exist: the probe counts the tenant's own."""
    own = two_tenants.query(f"SELECT count() FROM {table} WHERE tenant = 't0'").result_rows[0][0]
    assert rows(two_tenants, PREWHERE_PROBE.format(table=table, victim=B, columns=columns)) == [[own]]
    with pytest.raises(sandbox.QueryFailed) as failed:  # the same probe on its own rows fails, quoting nothing
        rows(two_tenants, PREWHERE_PROBE.format(table=table, victim=A, columns=columns))
    assert str(failed.value).startswith("CANNOT_PARSE_TEXT") and "LEAK" not in str(failed.value)
    assert not any(value in str(failed.value) for value in secrets_of(two_tenants, A) if len(value) > 2)


def test_the_throwif_oracle_answers_the_same_whatever_it_asks(two_tenants):
    """throwIf(tenant = other AND input_tokens >= N) answered yes/no about another tenant's rows; now it has no
    other tenant's row to throw on, so every N gives the same answer: the count of the caller's rows."""
    top = two_tenants.query("SELECT max(input_tokens) FROM usage_events WHERE tenant = 't1'").result_rows[0][0]
    own = two_tenants.query("SELECT count() FROM usage_events WHERE tenant = 't0'").result_rows[0][0]
    answers = {
        n: rows(
            two_tenants, f"SELECT count() FROM usage_events WHERE throwIf(tenant='{B}' AND input_tokens>={n},'X')=0"
        )
        for n in (0, top, top + 1)
    }
    assert all(a == [[own]] for a in answers.values())
    with pytest.raises(sandbox.QueryFailed, match="THROW_IF") as failed:  # on its own rows: thrown, value hidden
        rows(two_tenants, "SELECT throwIf(input_tokens >= 0, 'X') FROM usage_events")
    assert not any(value in str(failed.value) for value in secrets_of(two_tenants, A) if len(value) > 2)


def test_scalar_subqueries_and_aggregates_count_only_the_tenants_rows(two_tenants):
    own = two_tenants.query("SELECT count() FROM usage_events WHERE tenant = 't0'").result_rows[0][0]
    assert rows(
        two_tenants, "SELECT count(), (SELECT count() FROM usage_events WHERE tenant = 't1') FROM usage_events"
    ) == [[own, 0]]


@pytest.mark.parametrize(
    "sql, why",
    [
        ("SELECT tenant FROM usage_events SETTINGS additional_table_filters = {}", "settings"),
        ("SELECT tenant FROM (SELECT * FROM usage_events SETTINGS max_execution_time = 0)", "settings"),
        ("SELECT * FROM system.tables", "database 'system'"),
        ("SELECT count() FROM `system`.`parts`", "database 'system'"),
        ("SELECT * FROM INFORMATION_SCHEMA.TABLES", "database 'INFORMATION_SCHEMA'"),
        ("SELECT event_id FROM usage_event_ids", "no tenant column"),
        ("SELECT name FROM schema_migrations", "no tenant column"),
        ("SELECT * FROM numbers(10)", "numbers()"),
        ("SELECT tenant FROM merge('default', '^usage_e')", "merge()"),
        ("SELECT tenant FROM remote('127.0.0.1', default.usage_events)", "remote()"),
        ("SELECT * FROM file('/etc/passwd', 'LineAsString')", "file()"),
        ("SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString')", "url()"),
        ("SELECT file('/etc/passwd')", "file()"),
        ("SELECT dictGet('d', 'x', toUInt64(1))", "dictGet()"),
        ("SELECT joinGet('j', 'x', 1)", "joinGet()"),
        ("SELECT * FROM (EXPLAIN AST SELECT 1)", "viewExplain()"),
        ("SELECT tenant FROM usage_events FORMAT JSON", "one SELECT"),
    ],
)
def test_the_parse_gate_refuses_what_reads_outside_jevs_tables(two_tenants, sql, why):
    with pytest.raises(tenancy.Refused) as refused:
        tenancy.check_query(two_tenants, sql)  # not readonly here: a refused readonly query sticks in chdb
    assert why in str(refused.value)


@pytest.mark.parametrize("tenant", [A, None])
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count() FROM file('/etc/passwd', 'LineAsString')",
        "SELECT count() FROM url('http://127.0.0.1:9/', 'LineAsString')",
        "SELECT file('/etc/passwd')",
        "SELECT count() FROM system.tables",
    ],
)
def test_no_scope_reads_a_file_a_url_or_a_system_table(two_tenants, tenant, sql):
    """The admin scope (None: the owner's token, a "*" token) is refused the machine like a tenant."""
    with pytest.raises(sandbox.QueryFailed, match="may not"):
        rows(two_tenants, sql, tenant=tenant)


def test_tenant_names_cannot_break_out_of_the_export(two_tenants):
    assert rows(two_tenants, "SELECT DISTINCT tenant FROM usage_events", tenant=ODD) == [[ODD]]
    assert rows(two_tenants, "SELECT count() FROM usage_events", tenant=ODD) == [[30]]
    assert rows(two_tenants, "SELECT count() FROM usage_events", tenant="t0' OR 1 = 1 OR tenant = '") == [[0]]


def test_a_tenants_report_flame_graph_and_alerts_hold_only_its_rows(two_tenants):
    data = sandbox.run(two_tenants, "report", {"since": "7d"}, A, LIMITS)
    tokens, requests = two_tenants.query(
        "SELECT sum(input_tokens + output_tokens), uniqExact(request_id) FROM usage_events WHERE tenant = 't0'"
    ).result_rows[0]
    assert data["totals"]["tokens"] == tokens == data["request"]["tokens"]
    assert data["totals"]["requests"] == requests == sum(r["requests"] for r in data["service"]["overall"])
    assert {r["tenant"] for r in data["session"]["top"]} == {A}
    stacks = sandbox.run(two_tenants, "flamegraph", {"since": "7d"}, A, LIMITS)["stacks"]
    everyone = sandbox.run(two_tenants, "flamegraph", {"since": "7d"}, None, LIMITS)["stacks"]
    assert stacks and stacks == {s: w for s, w in everyone.items() if s.startswith(f"{A};")}
    assert {s.split(";")[0] for s in everyone} == {A, B, ODD}
    alerts = sandbox.run(two_tenants, "alerts", {"set": {"session_tokens_24h": 1}}, A, LIMITS)["alerts"]
    sessions = [a for a in alerts if a["rule"] == "session_tokens_24h"]
    assert sessions and all(a["scope"].startswith(f"tenant={A} ") for a in sessions)


def test_a_tenants_report_keeps_agreement_and_indices_to_its_rows(two_tenants):
    """The report's agreement (shadow_verdicts) and indices (indices_by_minute) come through the sandbox, each
    from the caller's rows only."""
    now = time.time() - 600
    VerdictStore(two_tenants).store(
        [
            Verdict(
                request_id=f"v{i}",
                ts=now,
                tenant=tenant,
                service="search",
                decision_type="ranking",
                kind="decide",
                mechanisms=["cache.l1"],
                agreed=agreed,
                kept=agreed,
            )
            for i, (tenant, agreed) in enumerate([(A, True), (A, True), (A, False), (B, False), (B, False)])
        ]
    )
    mine = sandbox.run(two_tenants, "report", {"since": "7d"}, A, LIMITS)
    everyone = sandbox.run(two_tenants, "report", {"since": "7d"}, None, LIMITS)
    assert (mine["agreement"]["overall"]["verdicts"], mine["agreement"]["overall"]["agreed"]) == (3, 2)
    assert everyone["agreement"]["overall"]["verdicts"] == 5
    assert mine["agreement"]["by_mechanism"]["cache.l1"]["verdicts"] == 3
    decided, model_decided = two_tenants.query(
        "SELECT sum(decisions), sum(model_decisions) FROM indices_by_minute WHERE tenant = {t:String}",
        parameters={"t": A},
    ).result_rows[0]
    assert decided and set(mine["indices"]) == {"te", "cp", "hr", "pe"}
    assert mine["indices"]["cp"]["value"] == round(model_decided / decided, 4)
    assert mine["indices"]["te"]["value"] is not None and everyone["indices"]["cp"]["value"] is not None
    alerts = sandbox.run(two_tenants, "alerts", {"set": {"te_alert": 1.01}}, A, LIMITS)["alerts"]
    assert [a["rule"] for a in alerts if a["scope"] == "index=te"] == ["token_efficiency_low"]


def test_a_registered_view_reads_only_the_tenants_rows(two_tenants):
    """A view in schemas.tables reaches a tenant's sandbox, re-created over the tenant's rows alone."""
    assert rows(two_tenants, "SELECT DISTINCT tenant FROM usage_savings_by_mechanism") == [[A]]
    assert sorted(rows(two_tenants, "SELECT DISTINCT tenant FROM usage_savings_by_mechanism", None)) == sorted(
        [[t] for t in (A, B, ODD)]
    )


def test_a_query_over_its_time_or_memory_limit_is_stopped(two_tenants):
    cross = "SELECT count() FROM usage_events a, usage_events b, usage_events c, usage_events d"
    with pytest.raises(sandbox.QueryFailed, match="TIMEOUT_EXCEEDED|stopped at JEV_QUERY_TIME_S=1"):
        rows(two_tenants, cross, limits=sandbox.Limits(time_s=1))  # the engine's limit, or the process's
    with pytest.raises(sandbox.QueryFailed, match="MEMORY_LIMIT_EXCEEDED"):
        rows(
            two_tenants,
            "SELECT groupArray(repeat('x', 1000)) FROM usage_events a, usage_events b",
            limits=sandbox.Limits(memory_mb=32),
        )


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
    async with QueryServer(clickhouse_dsn, TOKENS):
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
    assert (
        code == 200
        and body["totals"]["tokens"]
        == two_tenants.query(
            "SELECT sum(input_tokens + output_tokens) FROM usage_events WHERE tenant = 't0'"
        ).result_rows[0][0]
    )
    code, body = await ask("flamegraph", {"since": "24h"}, token)
    assert code == 200 and body["stacks"] and {s.split(";")[0] for s in body["stacks"]} == {A}
    for endpoint, request in (
        ("query", {**BY_TENANT, "tenant": B}),
        ("report", {"tenant": B}),
        ("flamegraph", {"tenant": B}),
    ):
        code, body = await ask(endpoint, request, token)
        assert code == 403 and body["error"] == "this token reads tenant 't0' only"
    code, body = await ask("query", {"sql": "SELECT * FROM usage_events SETTINGS additional_table_filters = {}"}, token)
    assert code == 400 and "settings" in body["error"]


async def test_endpoints_give_admin_tokens_every_tenant_or_the_one_asked(endpoints):
    ask, owner_token = endpoints
    for token in (owner_token, "ops-token-0123456789abcdef"):
        code, body = await ask("query", BY_TENANT, token)
        assert code == 200 and [r[0] for r in body["rows"]] == sorted([A, B, ODD])
        code, body = await ask("query", {**BY_TENANT, "tenant": B}, token)
        assert code == 200 and [r[0] for r in body["rows"]] == [B]


@pytest.mark.parametrize("tenant", [[A, B], {"name": B}, 7])
async def test_an_admin_call_with_a_tenant_that_is_not_a_string_is_refused_400_with_its_reason(endpoints, tenant):
    ask, owner_token = endpoints
    code, body = await ask("query", {**BY_TENANT, "tenant": tenant}, owner_token)
    assert code == 400 and '"tenant" must be one tenant\'s name as a string' in body["error"]


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
