"""Queries for the embedded engine's owner: one process may hold a chdb data directory at a time, so the
process that writes (the pipeline) serves read-only queries to the others (`jev sql`, `jev report`,
`jev flamegraph`) and to tenants.

The owner starts a QueryServer on 127.0.0.1 (ephemeral port) and writes `<dir>.owner.json` (mode 0600) with
its URL and a random bearer token that reads every tenant; readers find it next to the data directory.
JEV_QUERY_TOKENS adds tokens that each read one tenant (tenancy.load_tokens). Every endpoint takes a JSON
body and answers JSON; an admin token may narrow a call to one tenant with "tenant", a tenant token reads
its own tenant only:
  POST /query      {"sql"}                             → {"columns", "rows"}
  POST /report     {"since", "by"}                     → the report of `jev report --json`
  POST /flamegraph {"since", "service", "weight"}      → {"stacks": {folded stack: weight}}
Server DSNs (http://) need no owner: every process connects to the server itself.
"""
from __future__ import annotations

import asyncio
import hmac
import os
import re
import secrets
import urllib.error
import urllib.request
from pathlib import Path

import orjson
from aiohttp import web

from workers.analytics import flamegraph, report, source, tenancy

READ_ONLY = {"readonly": 2}  # no writes or DDL; per-query settings still allowed
READ_STATEMENTS = ("select", "with", "show", "describe", "desc", "explain", "exists")


def owner_file(dsn: str) -> Path | None:
    if not dsn.startswith("chdb://"):
        return None
    folder = Path(dsn.removeprefix("chdb://")).resolve()
    return folder.parent / f"{folder.name}.owner.json"


def check_read_only(sql: str) -> None:
    """One read statement only, writing no file. The embedded engine keeps a refused query's `readonly` setting
    for the whole process (its usage sink included), so there the statement is checked here instead of by the
    server; `INTO OUTFILE` would write a file as the owning process."""
    body = sql.strip().rstrip(";").strip()
    if not body or ";" in body or body.split(None, 1)[0].lower() not in READ_STATEMENTS:
        raise ValueError("only one read-only statement is allowed (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN, EXISTS)")
    if re.search(r"\boutfile\b", body, flags=re.I):
        raise ValueError("INTO OUTFILE is not allowed: the query would write a file; fetch rows with --json instead")


def run_query(client, sql: str) -> dict:
    """A read-only statement on `client` (a TenantClient keeps it to one tenant's rows)."""
    check_read_only(sql)
    engine = client.client if isinstance(client, tenancy.TenantClient) else client
    embedded = type(engine).__name__ == "ChdbClient"
    result = client.query(sql, settings=None if embedded else READ_ONLY)
    return {"columns": list(result.column_names), "rows": [list(r) for r in result.result_rows]}


def report_of(client, body: dict) -> dict:
    now = source.now()
    return report.collect(client, now - source.parse_since(body.get("since", "7d")), now, body.get("by", "service"))


def stacks_of(client, body: dict) -> dict:
    since = source.now() - source.parse_since(body.get("since", "24h"))
    return {"stacks": flamegraph.folded(client, since, body.get("tenant") or "", body.get("service", ""),
                                        body.get("weight", "tokens"))}


ENDPOINTS = {"query": lambda client, body: run_query(client, body.get("sql", "")), "report": report_of,
             "flamegraph": stacks_of}


def answer(settings, endpoint: str, body: dict) -> tuple[dict, str]:
    """(result, where it ran): here when the data directory is free, else in the process that owns it.
    body["tenant"] limits the call to that tenant's rows."""
    from infra.clickhouse import DataDirBusy

    try:
        client = source.open_client(settings)
    except DataDirBusy:
        found = ask_owner(settings.clickhouse, endpoint, body)
        if found is None:
            raise
        return found, "owner"
    via = "embedded" if settings.clickhouse.startswith("chdb") else "server"
    return ENDPOINTS[endpoint](tenancy.scoped(client, body.get("tenant")), body), via


class QueryServer:
    """`async with QueryServer(client, dsn, tokens):` serves ENDPOINTS to bearer-token holders: the owner
    file's token reads every tenant, `tokens` ({token: tenant or "*"}, tenancy.load_tokens) add more."""

    def __init__(self, client, dsn: str, tokens: dict[str, str] | None = None):
        self.client, self.path, self.token = client, owner_file(dsn), secrets.token_urlsafe(24)
        self.tokens = {**(tokens or {}), self.token: tenancy.ADMIN}
        self.runner: web.AppRunner | None = None

    def scope_of(self, request: web.Request) -> str | None:
        """The tenant (or "*") the request's bearer token reads; None for a missing or unknown token."""
        header = request.headers.get("Authorization", "")
        given = header.removeprefix("Bearer ").encode() if header.startswith("Bearer ") else b""
        found = [scope for token, scope in self.tokens.items() if hmac.compare_digest(given, token.encode())]
        return found[0] if given and found else None

    async def handle(self, request: web.Request) -> web.Response:
        scope = self.scope_of(request)
        if scope is None:
            return web.json_response({"error": f"missing or wrong bearer token: send 'Authorization: Bearer "
                                               f"<token>' (the owner's token is in {self.path}; tenant tokens "
                                               f"come from JEV_QUERY_TOKENS)"}, status=401)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        wanted = body.get("tenant") or ""
        if scope != tenancy.ADMIN and wanted not in ("", scope):
            return web.json_response({"error": f"this token reads tenant {scope!r} only"}, status=403)
        tenant = wanted if scope == tenancy.ADMIN else scope
        work = ENDPOINTS[request.match_info["endpoint"]]
        try:
            result = await asyncio.to_thread(work, tenancy.scoped(self.client, tenant), {**body, "tenant": tenant})
        except Exception as e:
            return web.json_response({"error": str(e)}, status=400)
        return web.Response(body=orjson.dumps(result, default=str), content_type="application/json")

    async def __aenter__(self) -> "QueryServer":
        if self.path is None:
            return self
        app = web.Application()
        app.router.add_post("/{endpoint:" + "|".join(ENDPOINTS) + "}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps({"url": f"http://127.0.0.1:{port}/query", "token": self.token, "pid": os.getpid()}))
        return self

    async def __aexit__(self, *exc) -> None:
        if self.runner:
            self.path.unlink(missing_ok=True)
            await self.runner.cleanup()


def ask_owner(dsn: str, endpoint: str, body: dict, timeout: float = 60.0) -> dict | None:
    """POST `body` to the owner's `endpoint` with the owner's token; None when no owner is serving."""
    path = owner_file(dsn)
    if path is None or not path.exists():
        return None
    owner = orjson.loads(path.read_bytes())
    url = owner["url"].rsplit("/", 1)[0] + f"/{endpoint}"
    req = urllib.request.Request(url, data=orjson.dumps(body), method="POST",
                                 headers={"Authorization": f"Bearer {owner['token']}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(orjson.loads(e.read()).get("error", str(e))) from None
    except urllib.error.URLError:
        return None
