"""Queries for the embedded engine's owner: one process may hold a chdb data directory at a time, so the
process that writes (the pipeline) serves read-only SQL to the others (`jev sql`, `jev report`).

The owner starts a QueryServer on 127.0.0.1 (ephemeral port) and writes `<dir>.owner.json` (mode 0600) with
its URL and a random bearer token; readers find it next to the data directory. Server DSNs (http://) need none.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import urllib.error
import urllib.request
from pathlib import Path

import orjson
from aiohttp import web

READ_ONLY = {"readonly": 2}  # no writes or DDL; per-query settings still allowed
READ_STATEMENTS = ("select", "with", "show", "describe", "desc", "explain", "exists")


def owner_file(dsn: str) -> Path | None:
    if not dsn.startswith("chdb://"):
        return None
    folder = Path(dsn.removeprefix("chdb://")).resolve()
    return folder.parent / f"{folder.name}.owner.json"


def check_read_only(sql: str) -> None:
    """One read statement only. The embedded engine keeps a refused query's `readonly` setting for the whole
    process (its usage sink included), so there the statement is checked here instead of by the server."""
    body = sql.strip().rstrip(";").strip()
    if not body or ";" in body or body.split(None, 1)[0].lower() not in READ_STATEMENTS:
        raise ValueError("only one read-only statement is allowed (SELECT, WITH, SHOW, DESCRIBE, EXPLAIN, EXISTS)")


def run_query(client, sql: str) -> dict:
    check_read_only(sql)
    embedded = type(client).__name__ == "ChdbClient"
    result = client.query(sql, settings=None if embedded else READ_ONLY)
    return {"columns": list(result.column_names), "rows": [list(r) for r in result.result_rows]}


class QueryServer:
    """`async with QueryServer(client, dsn):` serves POST /query {"sql": ...} with the bearer token."""

    def __init__(self, client, dsn: str):
        self.client, self.path, self.token = client, owner_file(dsn), secrets.token_urlsafe(24)
        self.runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"error": "missing or wrong bearer token"}, status=401)
        sql = (await request.json()).get("sql", "")
        try:
            body = await asyncio.to_thread(run_query, self.client, sql)
        except Exception as e:
            return web.json_response({"error": str(e)}, status=400)
        return web.Response(body=orjson.dumps(body, default=str), content_type="application/json")

    async def __aenter__(self) -> "QueryServer":
        if self.path is None:
            return self
        app = web.Application()
        app.router.add_post("/query", self.handle)
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


def ask_owner(dsn: str, sql: str, timeout: float = 60.0) -> dict | None:
    """Run `sql` in the process that owns `dsn`'s data directory; None when no owner is serving."""
    path = owner_file(dsn)
    if path is None or not path.exists():
        return None
    owner = orjson.loads(path.read_bytes())
    req = urllib.request.Request(owner["url"], data=orjson.dumps({"sql": sql}), method="POST",
                                 headers={"Authorization": f"Bearer {owner['token']}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(orjson.loads(e.read()).get("error", str(e))) from None
    except urllib.error.URLError:
        return None
