"""The query endpoints of the embedded engine's owner, and how other processes reach them.

One process may hold a chdb data directory at a time, so the pipeline serves the analytics surfaces (`jev sql`,
`report`, `flamegraph`, `alerts`) to other processes and to tenants over 127.0.0.1, its URL and an admin token in
`<dir>.owner.json` (mode 0600). Every call runs through sandbox.run under the query limits; a tenant token reads
its own tenant only; each token has at most JEV_QUERY_CONCURRENCY calls running, admin calls never queue behind
tenants', and a call whose client goes away is cancelled. Endpoints: POST /query, /report, /flamegraph, /alerts.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import os
import secrets
import threading
import urllib.error
import urllib.request
from pathlib import Path

import orjson
from aiohttp import web

from infra.clickhouse import connect
from streams.core.inflight import IN_FLIGHT
from streams.runtime.usage_spill import LazyClient
from streams.security.tenancy import denied
from workers.analytics import sandbox, source, tenancy

ENDPOINTS = sandbox.ENDPOINTS


def owner_file(dsn: str) -> Path | None:
    if not dsn.startswith("chdb://"):
        return None
    folder = Path(dsn.removeprefix("chdb://")).resolve()
    return folder.parent / f"{folder.name}.owner.json"


def answer(settings, endpoint: str, body: dict) -> tuple[dict, str]:
    """(result, where it ran): the owner's endpoint when a process owns the data directory and serves it (tried
    first), else a sandbox fed from this process's own connection. body["tenant"] limits the call to that
    tenant's rows."""
    from infra.clickhouse import DataDirBusy

    found = ask_owner(settings.clickhouse, endpoint, body)
    if found is not None:
        return found, "owner"
    try:
        client = source.open_client(settings)
    except DataDirBusy as e:  # the lock is held and no owner answered
        raise DataDirBusy(
            f"{e}; it answers no query endpoint at {owner_file(settings.clickhouse)} (still starting?)"
        ) from None
    via = "embedded" if settings.clickhouse.startswith("chdb") else "server"
    return sandbox.run(client, endpoint, body, body.get("tenant") or None, sandbox.Limits.of(settings)), via


class QueryServer:
    """`async with QueryServer(dsn, tokens, limits, concurrency, snapshot_s):` serves ENDPOINTS of the embedded
    engine at `dsn` (which this process owns) to bearer-token holders: the owner file's token reads every tenant,
    `tokens` ({token: tenant or "*"}, tenancy.load_tokens) add more. Each call runs in a sandbox fed from a
    snapshot of its scope's rows, exported at most once per `snapshot_s` seconds on this server's own threads
    and its own engine connection: chdb runs one query at a time per connection, so an export on the pipeline's
    connection would hold up the usage sink (and ingest's request texts) for as long as it ran. The engine
    writes the snapshot files itself; the rows never pass through this process's Python heap."""

    def __init__(
        self,
        dsn: str,
        tokens: dict[str, str] | None = None,
        limits: sandbox.Limits | None = None,
        concurrency: int = 2,
        snapshot_s: float = 30.0,
        yield_s: float = 0.0,
        min_share: float = 0.0,
    ):
        """`yield_s` > 0: sandboxes pause while this process has requests in flight (streams.core.inflight), each
        request holding them for at most that long (JEV_QUERY_YIELD_S), and run `min_share` of the time even
        then (JEV_QUERY_MIN_SHARE)."""
        self.dsn, self.path, self.token = dsn, owner_file(dsn), secrets.token_urlsafe(24)
        self.client = LazyClient(lambda: connect(dsn))  # the export connection, opened by the first export
        self.tokens = {**(tokens or {}), self.token: tenancy.ADMIN}
        self.limits, self.concurrency = limits or sandbox.Limits(), max(1, concurrency)
        self.snapshots = sandbox.Snapshots(snapshot_s, to_file=True)
        self.pauser = None
        if yield_s > 0:
            IN_FLIGHT.hold_s = yield_s
            self.pauser = sandbox.Pauser(IN_FLIGHT, min_share)
        self.running: collections.Counter = collections.Counter()  # calls in flight per token
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="jev-query")
        # the admin's calls run on threads of their own: never queued behind tenants' calls
        self.admin_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="jev-admin-query")
        self.runner: web.AppRunner | None = None

    @classmethod
    def of(cls, settings) -> QueryServer:
        """The server the settings describe (JEV_CLICKHOUSE, JEV_QUERY_*)."""
        return cls(
            settings.clickhouse,
            tenancy.load_tokens(settings.query_tokens),
            sandbox.Limits.of(settings),
            settings.query_concurrency,
            settings.query_snapshot_s,
            settings.query_yield_s,
            settings.query_min_share,
        )

    def token_of(self, request: web.Request) -> str | None:
        """The known bearer token the request carries; None for a missing or unknown one."""
        header = request.headers.get("Authorization", "")
        given = header.removeprefix("Bearer ").encode() if header.startswith("Bearer ") else b""
        found = [token for token in self.tokens if hmac.compare_digest(given, token.encode())]
        return found[0] if given and found else None

    async def handle(self, request: web.Request) -> web.Response:
        token = self.token_of(request)
        if token is None:
            return web.json_response(
                {
                    "error": f"missing or wrong bearer token: send 'Authorization: Bearer "
                    f"<token>' (the owner's token is in {self.path}; tenant tokens "
                    f"come from JEV_QUERY_TOKENS)"
                },
                status=401,
            )
        scope = self.tokens[token]
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        if not isinstance(body, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        wanted = body.get("tenant") or ""
        if not isinstance(wanted, str):
            return web.json_response(
                {
                    "error": f'"tenant" must be one tenant\'s name as a string, got a JSON '
                    f"{type(wanted).__name__}: call once per tenant, or leave it out to "
                    f"read every tenant this token may read"
                },
                status=400,
            )
        if scope != tenancy.ADMIN and wanted not in ("", scope):
            denied("read", scope, "a tenant token asked for another tenant's rows", f"tenant {wanted!r}")
            return web.json_response({"error": f"this token reads tenant {scope!r} only"}, status=403)
        if self.running[token] >= self.concurrency:
            return web.json_response(
                {
                    "error": f"this token already has {self.running[token]} calls running "
                    f"(JEV_QUERY_CONCURRENCY={self.concurrency}): wait for one to "
                    f"finish"
                },
                status=429,
            )
        tenant = wanted if scope == tenancy.ADMIN else scope
        cancelled = threading.Event()
        self.running[token] += 1
        try:
            call = asyncio.get_running_loop().run_in_executor(
                self.admin_pool if scope == tenancy.ADMIN else self.pool,
                sandbox.run,
                self.client,
                request.match_info["endpoint"],
                {**body, "tenant": tenant},
                tenant or None,
                self.limits,
                cancelled,
                self.snapshots,
                self.pauser,
            )
            result = await asyncio.shield(call)
        except asyncio.CancelledError:
            cancelled.set()  # the client went away: the sandbox is killed, its thread returns
            call.add_done_callback(lambda done: done.exception())  # its QueryFailed is expected, not lost
            raise
        except (sandbox.QueryFailed, ValueError) as e:
            return web.json_response({"error": str(e)}, status=400)
        except Exception as e:
            return web.json_response({"error": sandbox.public_error(e)}, status=500)
        finally:
            self.running[token] -= 1
        return web.Response(body=orjson.dumps(result, default=str), content_type="application/json")

    async def __aenter__(self) -> QueryServer:
        if self.path is None:
            return self
        app = web.Application()
        app.router.add_post("/{endpoint:" + "|".join(ENDPOINTS) + "}", self.handle)
        self.runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        write_private(
            self.path, orjson.dumps({"url": f"http://127.0.0.1:{port}/query", "token": self.token, "pid": os.getpid()})
        )
        return self

    async def __aexit__(self, *exc) -> None:
        if self.runner:
            self.path.unlink(missing_ok=True)
            await self.runner.cleanup()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.admin_pool.shutdown(wait=False, cancel_futures=True)
        self.close()

    def close(self) -> None:
        """Drop the snapshots, resume any paused sandbox (its call ends with the server) and close the export
        connection."""
        self.snapshots.close()
        if self.pauser is not None:
            self.pauser.close()
        if self.client.client is not None:
            self.client.client.close()
            self.client.client = None


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to a file only its owner can read: a file (or link) already there is replaced, not reused,
    so neither its mode nor a link target carries over."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def ask_owner(dsn: str, endpoint: str, body: dict, timeout: float = 300.0) -> dict | None:
    """POST `body` to the owner's `endpoint` with the owner's token; None when no owner is serving."""
    path = owner_file(dsn)
    if path is None or not path.exists():
        return None
    owner = orjson.loads(path.read_bytes())
    url = owner["url"].rsplit("/", 1)[0] + f"/{endpoint}"
    req = urllib.request.Request(
        url,
        data=orjson.dumps(body),
        method="POST",
        headers={"Authorization": f"Bearer {owner['token']}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise RuntimeError(orjson.loads(e.read()).get("error", str(e))) from None
    except urllib.error.URLError:
        return None
