"""The owner's query endpoints under a hostile or careless caller: the owner file is private whatever was there,
a token has at most JEV_QUERY_CONCURRENCY calls running, a caller that goes away has its query killed, and the
analytics commands work while another process owns the data directory (found by trying its endpoint first, then
by the directory's lock), exports never hold the pipeline's engine connection, and sandboxes pause while the
pipeline has requests in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import orjson
import psutil
import pytest

from schemas.tables import TENANT_VIEWS
from streams.core.inflight import InFlight
from streams.runtime.usage_sink import UsageSink
from workers.analytics import sample, sandbox
from workers.analytics.owner import QueryServer, owner_file
from workers.analytics.sandbox import snapshots as snapshot_module
from workers.cli.main import main

SLOW = "SELECT count() FROM usage_events a, usage_events b, usage_events c, usage_events d"


@pytest.fixture
def filled(usage_db):
    UsageSink(usage_db).insert(sample.usage_events(200, time.time() - 3600, span_s=3600))
    return usage_db


def post(url: str, body: dict, token: str, timeout: float = 120) -> tuple[int, dict]:
    req = urllib.request.Request(
        url,
        data=orjson.dumps(body),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, orjson.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, orjson.loads(e.read())


def sandboxes() -> list[psutil.Process]:
    """The sandbox processes running under this one (exited ones not counted)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "workers.analytics.sandbox" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("before", ["readable file", "link"])
async def test_the_owner_file_is_private_whatever_existed_before(filled, clickhouse_dsn, tmp_path, before):
    path = owner_file(clickhouse_dsn)
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    if before == "link":
        path.symlink_to(target)
    else:
        path.write_text('{"token": "old"}')
        path.chmod(0o644)
    async with QueryServer(clickhouse_dsn) as server:
        assert not path.is_symlink() and stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert orjson.loads(path.read_bytes())["token"] == server.token
        assert target.read_text() == "{}"  # a link's target is never written


async def test_a_token_has_at_most_its_concurrency_and_a_caller_that_leaves_is_cancelled(filled, clickhouse_dsn):
    async with QueryServer(clickhouse_dsn, limits=sandbox.Limits(time_s=120), concurrency=1) as server:
        owner = orjson.loads(owner_file(clickhouse_dsn).read_bytes())
        slow = asyncio.create_task(asyncio.to_thread(post, owner["url"], {"sql": SLOW}, owner["token"], 8))
        deadline = time.monotonic() + 60
        while not sandboxes() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert sandboxes(), "the slow query's sandbox never started"
        code, body = await asyncio.to_thread(post, owner["url"], {"sql": "SELECT 1"}, owner["token"])
        assert code == 429 and "JEV_QUERY_CONCURRENCY=1" in body["error"]
        with pytest.raises(TimeoutError):  # the client gives up after 8 s and closes its connection
            await slow
        deadline = time.monotonic() + 15
        while sandboxes() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert not sandboxes(), "the sandbox of a caller that went away still runs"
        assert server.running[server.token] == 0
        code, body = await asyncio.to_thread(post, owner["url"], {"sql": "SELECT 1"}, owner["token"])
        assert code == 200 and body["rows"] == [[1]]


OWNER = textwrap.dedent("""
    import asyncio, sys, time
    from infra import clickhouse
    from streams.runtime.usage_sink import UsageSink
    from workers.analytics import sample
    from workers.analytics.owner import QueryServer

    async def main(dsn):
        client = clickhouse.open_migrated(dsn)
        UsageSink(client).insert(sample.usage_events(100, time.time() - 3600, span_s=3600))
        async with QueryServer(dsn):
            print("serving", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    asyncio.run(main(sys.argv[1]))
""")


@pytest.fixture
def owned(tmp_path):
    """A data directory owned by another process that serves the query endpoints, as `jev worker stream` does."""
    dsn = f"chdb:///{tmp_path / 'clickhouse'}"
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, dsn],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.stdout.readline().strip() == b"serving"
    yield dsn
    proc.stdin.close()
    proc.wait(timeout=30)


def test_analytics_commands_work_while_another_process_owns_the_data_dir(owned, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("JEV_CLICKHOUSE_DSN", owned)
    assert main(["sql", "--json", "SELECT count() AS n FROM usage_events"]) == 0
    row, summary = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["n"] > 0 and summary["via"] == "owner"
    assert main(["report", "--json"]) == 0
    assert orjson.loads(capsys.readouterr().out.splitlines()[-1])["totals"]["requests"] == 100
    assert main(["flamegraph", "-o", str(tmp_path / "f.svg")]) == 0
    assert "<svg" in (tmp_path / "f.svg").read_text()
    assert main(["alerts", "--json", "--set", "session_tokens_24h=1"]) == 1  # exit 1: alerts fired
    assert "session_tokens_24h" in orjson.loads(capsys.readouterr().out.splitlines()[-1])["rules"]
    owner_file(owned).unlink()  # the owner still holds the lock but serves nothing
    assert main(["sql", "SELECT 1"]) == 2
    assert "owned by another running process" in capsys.readouterr().err


def test_snapshots_export_a_scope_once_per_window_and_keep_scopes_apart(filled, tmp_path, monkeypatch):
    exports, original = [], snapshot_module.export

    def counting(client, tenant, folder, limits, to_file=False):
        exports.append(tenant)
        return original(client, tenant, folder, limits, to_file)

    monkeypatch.setattr(snapshot_module, "export", counting)
    snapshots, stale = sandbox.Snapshots(max_age_s=60), sandbox.Snapshots(max_age_s=0)
    try:
        for n, tenant in enumerate(("t0", "t0", "t1", None)):
            (tmp_path / str(n)).mkdir()
            assert "usage_events" in snapshots.take(filled, tenant, sandbox.Limits(), tmp_path / str(n))
        assert exports == ["t0", "t1", None]
        count = sandbox.run(
            filled,
            "query",
            {"sql": "SELECT uniqExact(tenant) FROM usage_events"},
            "t1",
            sandbox.Limits(),
            snapshots=snapshots,
        )
        assert count["rows"] == [[1]] and exports == ["t0", "t1", None]  # the snapshot, not a new export
        for _ in range(2):
            sandbox.run(filled, "query", {"sql": "SELECT 1"}, "t0", sandbox.Limits(), snapshots=stale)
        assert exports[3:] == ["t0", "t0"]
    finally:
        snapshots.close()
        stale.close()
    assert not snapshots.root.exists()


@pytest.mark.parametrize("tenant", ["t0", None, "nobody"])
def test_a_snapshot_the_engine_writes_itself_holds_the_same_rows(filled, tmp_path, tenant):
    """The owner's snapshots are written by the engine (INTO OUTFILE): byte for byte what a read through Python
    would have written, for one tenant, every tenant, and a tenant without rows."""
    (tmp_path / "engine").mkdir()
    (tmp_path / "python").mkdir()
    tables = sandbox.export(filled, tenant, tmp_path / "engine", sandbox.Limits(), to_file=True)
    assert tables == sandbox.export(filled, tenant, tmp_path / "python", sandbox.Limits())
    assert "usage_events" in tables and "agreement_by_mechanism_day" in tables  # the views come along
    for name in tables:
        for kind in ("sql", "native"):  # a view has its definition and no rows
            written, read = tmp_path / "engine" / f"{name}.{kind}", tmp_path / "python" / f"{name}.{kind}"
            assert written.exists() == read.exists() == (kind == "sql" or name not in TENANT_VIEWS), (name, kind)
            assert not written.exists() or written.read_bytes() == read.read_bytes(), (name, kind)
    assert (len((tmp_path / "engine" / "usage_events.native").read_bytes()) > 1000) == (tenant != "nobody")


async def test_the_servers_exports_never_wait_on_or_hold_the_pipelines_connection(filled, clickhouse_dsn):
    """chdb runs one query at a time per connection: the server exports on a connection of its own, so the
    pipeline's writes (the usage sink, ingest's request texts) go on while an export runs: the write ends
    before the export's 8-second query does (on a shared connection it would wait for it)."""
    async with QueryServer(clickhouse_dsn) as server:
        busy = asyncio.create_task(
            asyncio.to_thread(
                server.client.query, "SELECT sleepEachRow(1) FROM numbers(8)", settings={"max_block_size": 1}
            )
        )
        await asyncio.sleep(0.5)
        events = [e.derive(event_id=f"{e.event_id}:concurrent") for e in sample.usage_events(5, time.time(), span_s=1)]
        written = await asyncio.to_thread(UsageSink(filled).insert, events)
        assert not busy.done(), "the write waited for the export connection's query to end"
        await busy
    assert written == len(events)


def status_within(proc: psutil.Process, wanted: set[str], seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while proc.status() not in wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.status()


async def test_sandboxes_pause_while_the_pipeline_has_requests_in_flight(filled):
    """A sandbox stops (SIGSTOP) when a request is sent on for work and resumes when it is decided, or when
    its hold runs out; a sandbox started while requests are in flight starts stopped."""
    flight = InFlight(hold_s=1.5)
    pauser = sandbox.Pauser(flight)
    cancelled = threading.Event()
    call = asyncio.create_task(
        asyncio.to_thread(
            sandbox.run, filled, "query", {"sql": SLOW}, None, sandbox.Limits(time_s=60), cancelled, None, pauser
        )
    )
    try:
        deadline = time.monotonic() + 60
        while not sandboxes() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        child = sandboxes()[0]
        assert status_within(child, {psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING}, 5) != psutil.STATUS_STOPPED
        flight.hold(["r1"])
        assert status_within(child, {psutil.STATUS_STOPPED}, 2) == psutil.STATUS_STOPPED
        flight.release(["r1"])
        assert status_within(child, {psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING}, 2) != psutil.STATUS_STOPPED
        flight.hold(["r2"])  # never decided: its hold runs out after 1.5 s
        assert status_within(child, {psutil.STATUS_STOPPED}, 2) == psutil.STATUS_STOPPED
        assert (
            await asyncio.to_thread(status_within, child, {psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING}, 5)
            != psutil.STATUS_STOPPED
        )
        flight.hold(["r3"])
        second = asyncio.create_task(
            asyncio.to_thread(
                sandbox.run, filled, "query", {"sql": "SELECT 1"}, None, sandbox.Limits(), None, None, pauser
            )
        )
        while len(sandboxes()) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert all(status_within(p, {psutil.STATUS_STOPPED}, 2) == psutil.STATUS_STOPPED for p in sandboxes())
        flight.release(["r3"])
        assert (await second)["rows"] == [[1]]
    finally:
        cancelled.set()
        with pytest.raises(sandbox.QueryFailed, match="cancelled"):
            await call
        pauser.close()


class Signalled:
    """A stand-in process that records the signals a Pauser sends it."""

    def __init__(self):
        self.signals: list[int] = []

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)


def test_a_paused_sandbox_still_runs_its_minimum_share():
    """A pipeline that never idles (a hold renewed forever) still lets a sandbox run a slice of every period, so
    a tenant's query finishes before its time limit; with no minimum share it stays stopped throughout."""
    for share, slices in ((0.2, True), (0.0, False)):
        flight = InFlight(hold_s=60)
        pauser = sandbox.Pauser(flight, min_share=share, period_s=0.1)
        proc = Signalled()
        pauser.add(proc)
        flight.hold(["r1"])
        time.sleep(0.55)
        assert flight.busy()
        resumed = proc.signals.count(signal.SIGCONT)
        assert (resumed >= 3) is slices, proc.signals
        assert proc.signals[0] == signal.SIGSTOP
        pauser.close()
        assert proc.signals[-1] == signal.SIGCONT, "closing resumes every sandbox"
        with pytest.raises(ValueError, match="JEV_QUERY_MIN_SHARE"):
            sandbox.Pauser(flight, min_share=1.0)
