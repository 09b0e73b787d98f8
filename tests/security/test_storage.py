"""What ClickHouse keeps and who can read it: no raw prompt text by default (opt-in: a table of its own under a
TTL), tenant-scoped flame graphs, and the embedded engine's query endpoint refuses callers without its bearer
token and refuses writes."""

from __future__ import annotations

import datetime as dt
import os
import stat
import urllib.error
import urllib.request

import orjson
import pytest

from infra.clickhouse import USAGE_COLUMNS, USAGE_TABLES
from schemas.records import Candidate, Request, Turn
from streams.runtime.usage_sink import UsageSink
from streams.usage.events import usage_event

SECRET = "PROMPT-SECRET-7f3a"  # appears only in the prompt: state, history and candidate text


def request(tenant: str, i: int) -> Request:
    return Request(
        request_id=f"{tenant}-r{i}",
        tenant=tenant,
        service="support",
        decision_type="customer_service",
        state=f"my card 4111 1111 1111 1111 was charged twice {SECRET}",
        session_id=f"{tenant}-s{i}",
        history=[Turn(role="user", content=f"earlier message {SECRET}")],
        candidates=[Candidate(id="refund", text=f"refund the customer {SECRET}")],
    )


@pytest.fixture
def stored(usage_db):
    events = [
        usage_event(request(tenant, i), stage, model="gpt-4o-mini", input_tokens=10 + i, output_tokens=2)
        for tenant in ("acme", "globex")
        for i in range(5)
        for stage in ("ingest", "score", "postprocess")
    ]
    assert UsageSink(usage_db).insert(events) == len(events)
    return usage_db


def test_usage_events_have_no_column_for_prompt_text():
    assert not {"state", "history", "candidates_text", "prompt", "context", "text", "content"} & set(USAGE_COLUMNS)


def prompt_text_hits(client, tables: list[str]) -> dict[str, int]:
    """{table.column: rows holding the prompt's secret or card number} over the String columns of `tables`."""
    hits = {}
    for table in tables:
        for column, kind, *_ in client.query(f"DESCRIBE TABLE {table}").result_rows:
            if "String" in kind and not column.startswith("gen_ai."):
                hits[f"{table}.{column}"] = client.query(
                    f"SELECT count() FROM {table} WHERE position(toString(`{column}`), {{s:String}}) > 0 "
                    f"OR position(toString(`{column}`), '4111 1111') > 0",
                    parameters={"s": SECRET},
                ).result_rows[0][0]
    return hits


def test_no_table_stores_raw_prompt_text_by_default(stored, settings):
    from streams.usage.texts import request_texts

    assert settings.raw_text_days == 0 and request_texts(settings, stored) is None
    assert stored.query("EXISTS TABLE request_texts").result_rows[0][0] == 0
    hits = prompt_text_hits(stored, USAGE_TABLES)
    assert hits and not any(hits.values()), f"prompt text in {[c for c, n in hits.items() if n]}"


def test_flame_graph_for_one_tenant_reads_only_that_tenants_rows(stored):
    from workers.analytics import flamegraph

    since = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    acme = flamegraph.folded(stored, since, tenant="acme")
    assert acme and all(stack.split(";")[0] == "acme" for stack in acme)
    assert sum(acme.values()) == sum(10 + i + 2 for i in range(5)) * 3
    assert not flamegraph.folded(stored, since, tenant="acme' OR '1'='1")  # parameters, not string splicing


@pytest.fixture
async def query_server(stored, clickhouse_dsn):
    from workers.analytics.owner import QueryServer, owner_file

    async with QueryServer(clickhouse_dsn) as server:
        yield server, orjson.loads(owner_file(clickhouse_dsn).read_bytes()), owner_file(clickhouse_dsn)


def post(url: str, sql: str, token: str | None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url, data=orjson.dumps({"sql": sql}), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


@pytest.mark.parametrize("token, status", [(None, 401), ("wrong", 401), ("", 401)])
async def test_query_endpoint_refuses_callers_without_the_token(query_server, token, status):
    import asyncio

    _, owner, _ = query_server
    code, body = await asyncio.to_thread(post, owner["url"], "SELECT count() FROM usage_events", token)
    assert code == status and "token" in body["error"]


async def test_query_endpoint_answers_the_token_holder_read_only(query_server):
    import asyncio

    _, owner, path = query_server
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # only the owning user can read the token
    code, body = await asyncio.to_thread(post, owner["url"], "SELECT count() FROM usage_events", owner["token"])
    assert code == 200 and body["rows"] == [[30]]
    code, body = await asyncio.to_thread(post, owner["url"], "DROP TABLE usage_events", owner["token"])
    assert code == 400
    code, body = await asyncio.to_thread(post, owner["url"], "SELECT count() FROM usage_events", owner["token"])
    assert body["rows"] == [[30]]


@pytest.fixture
def raw_text_table(usage_db):
    yield usage_db
    usage_db.command("DROP TABLE IF EXISTS request_texts")


def test_raw_text_opt_in_stores_it_apart_under_a_ttl(stored, raw_text_table, settings):
    from streams.usage.texts import request_texts
    from workers.analytics import sandbox

    texts = request_texts(settings.replace(raw_text_days=3), stored)
    assert texts.store([request(tenant, i) for tenant in ("acme", "globex") for i in range(5)]) == 10
    assert "TTL toDateTime(ts) + toIntervalDay(3)" in stored.query("SHOW CREATE TABLE request_texts").result_rows[0][0]
    hits = prompt_text_hits(stored, ["request_texts"])
    assert hits["request_texts.state"] == hits["request_texts.history"] == hits["request_texts.candidates"] == 10
    assert not any(prompt_text_hits(stored, USAGE_TABLES).values())  # never in the usage tables
    acme = sandbox.run(stored, "query", {"sql": "SELECT DISTINCT tenant FROM request_texts"}, "acme", sandbox.Limits())[
        "rows"
    ]
    assert acme == [["acme"]]  # a tenant reads its own raw text only
    request_texts(settings.replace(raw_text_days=7), stored)  # a new retention moves the TTL
    assert "toIntervalDay(7)" in stored.query("SHOW CREATE TABLE request_texts").result_rows[0][0]


def test_raw_text_ttl_deletes_rows_older_than_the_retention(raw_text_table, settings):
    import time

    from streams.usage.texts import request_texts

    texts = request_texts(settings.replace(raw_text_days=3), raw_text_table)
    texts.store([request("acme", i) for i in range(4)], now=time.time() - 4 * 86400)
    texts.store([request("acme", i) for i in range(4, 6)])
    raw_text_table.command("OPTIMIZE TABLE request_texts FINAL")
    kept = raw_text_table.query("SELECT request_id FROM request_texts ORDER BY request_id").result_rows
    assert kept == [("acme-r4",), ("acme-r5",)]


def test_raw_text_that_cannot_be_stored_is_dropped_not_raised(raw_text_table, settings, caplog):
    from streams.usage.texts import request_texts

    texts = request_texts(settings.replace(raw_text_days=1), raw_text_table)
    raw_text_table.command("DROP TABLE request_texts")
    assert texts.store([request("acme", i) for i in range(3)]) == 0
    assert texts.dropped == 3 and "raw text of 3 requests not stored" in caplog.text
