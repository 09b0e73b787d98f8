"""Where every analytics query runs: a child process with its own engine that holds only the rows its caller may
read.

Tenant isolation by construction: the owner copies the caller's rows out of its engine with one fixed query per
table (`SELECT * FROM t WHERE tenant = {tenant}`, the tenant a query parameter; every tenant for the admin scope)
in ClickHouse's Native format, and a fresh child process (`python -m workers.analytics.sandbox DIR`) loads them
into the same table definitions in its own engine under a private temporary directory, then runs the caller's
work there: `jev sql`'s query, the report, the flame graph or the alerts. Another tenant's rows are not in that
engine, so no query text, PREWHERE, throwIf oracle or error message can reach them.

The child also keeps the caller away from the pipeline and the machine:
- every query runs with readonly=1 (no writes, no table functions such as file(), url(), remote(); no SETTINGS
  clause can lift the limits) and with max_execution_time, max_memory_usage and max_threads from the settings
  (JEV_QUERY_TIME_S, JEV_QUERY_MEMORY_MB, JEV_QUERY_THREADS);
- a caller's own SQL passes tenancy.check_ast first (one SELECT; Jev's tables only; no scalar file());
- the child runs in the idle CPU class (SCHED_IDLE) with a minimal environment (of JEV_* only the index ranges
  JEV_INDEX_*, no secrets), dies with its parent, and is killed when its time is up or its caller goes away
  (`cancelled`);
- errors come back as the ClickHouse error name and the message with every quoted value and everything after the
  first colon removed, so an error never carries row data.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

from workers.analytics import tenancy

JEV_TABLES = ("usage_events", "usage_by_request", "usage_by_session_hour", "usage_by_stack_hour",
              "usage_by_business_day", "request_texts", "shadow_verdicts",
              "indices_by_minute")  # the tables a query may read (those that exist), as infra.clickhouse.access

READ_STATEMENTS = ("select", "with")
INDEX_SETTINGS = "JEV_INDEX_"  # the only settings a sandbox gets (the report's healthy index ranges): no secrets
LOAD_ALLOWANCE_S = 60.0  # start-up and loading time allowed on top of the query limit
POLL_S = 0.25  # how often a waiting call looks at its sandbox: each look takes the owner's GIL from its pipeline
CODE = re.compile(r"Code: (\d+)\.")
NAME = re.compile(r"\s*\(([A-Z][A-Z_]+)\)")
VERSION = re.compile(r"\s*\(version [^)]*\)")
QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`\\]|\\.)*`")


class QueryFailed(RuntimeError):
    """The caller's work failed in its sandbox; the message is safe to return to the caller."""


@dataclasses.dataclass(frozen=True)
class Limits:
    time_s: float = 30.0
    memory_mb: int = 1024
    threads: int = 1

    @classmethod
    def of(cls, settings) -> "Limits":
        return cls(settings.query_time_s, settings.query_memory_mb, settings.query_threads)

    def query_settings(self) -> dict:
        """Readonly comes last: the engine applies settings in order and refuses any change after readonly=1."""
        return {"max_execution_time": self.time_s, "max_memory_usage": self.memory_mb << 20,
                "max_threads": self.threads, "readonly": 1}


def check_read_only(sql: str) -> None:
    """One SELECT (or WITH … SELECT), writing no file; the statement kind is checked before any parse."""
    body = sql.strip().rstrip(";").strip()
    if not body or ";" in body or body.split(None, 1)[0].lower() not in READ_STATEMENTS:
        raise ValueError("only one read-only statement is allowed: a SELECT (or WITH … SELECT)")
    if re.search(r"\boutfile\b", body, flags=re.I):
        raise ValueError("INTO OUTFILE is not allowed: the query would write a file; fetch rows with --json instead")


def public_error(e: BaseException) -> str:
    """An error as the caller may see it: ClickHouse's error name and the head of its message, quoted values
    and everything after the first colon removed (that is where ClickHouse quotes rows and values)."""
    text = str(e).strip()
    code = CODE.search(text)
    if not code:
        return QUOTED.sub("'…'", text.split("\n", 1)[0]).split(": ", 1)[0][:300]
    names = NAME.findall(text)
    message = QUOTED.sub("'…'", text.rsplit("DB::Exception:", 1)[-1]).strip()
    head = NAME.sub("", VERSION.sub("", message.split(": ", 1)[0])).strip().rstrip(".")
    return f"{names[-1] if names else 'ERROR'} (ClickHouse code {code.group(1)}): {head[:200]}"


class Limited:
    """The sandbox engine's client, every query under the caller's limits and read-only."""

    def __init__(self, client, limits: Limits):
        self.client, self.limits = client, limits

    def query(self, sql: str, parameters: dict | None = None, settings: dict | None = None):
        return self.client.query(sql, parameters=parameters, settings={**(settings or {}),
                                                                       **self.limits.query_settings()})

    def command(self, sql: str, parameters: dict | None = None, settings: dict | None = None):
        return self.client.command(sql, parameters=parameters, settings={**(settings or {}),
                                                                         **self.limits.query_settings()})


def run_query(client, sql: str) -> dict:
    """The caller's own SQL: read-only, Jev's tables only (checked on ClickHouse's parse), rows as JSON lists."""
    check_read_only(sql)
    tenancy.check_query(client, sql)
    result = client.query(sql)
    return {"columns": list(result.column_names), "rows": [list(r) for r in result.result_rows]}


def window(body: dict, default: str) -> tuple[dt.datetime, dt.datetime]:
    from workers.analytics import source

    now = source.now()
    return now - source.parse_since(body.get("since") or default), now


def report_of(client, body: dict) -> dict:
    from workers.analytics import report

    since, now = window(body, "7d")
    return report.collect(client, since, now, body.get("by", "service"))


def stacks_of(client, body: dict) -> dict:
    from workers.analytics import flamegraph

    since, _ = window(body, "24h")
    return {"stacks": flamegraph.folded(client, since, "", body.get("service", ""), body.get("weight", "tokens"))}


def alerts_of(client, body: dict) -> dict:
    from workers.analytics import alerts, source

    base = alerts.Thresholds()
    changes = {k: type(getattr(base, k))(v) for k, v in (body.get("set") or {}).items()
               if k in alerts.Thresholds.__dataclass_fields__ and k != "daily_budgets"}
    thresholds = base.replace(**changes, daily_budgets={k: int(v) for k, v in (body.get("budgets") or {}).items()})
    return {"alerts": [a.asdict() for a in alerts.evaluate_alerts(client, thresholds, source.now())]}


ENDPOINTS = {"query": lambda client, body: run_query(client, body.get("sql", "")), "report": report_of,
             "flamegraph": stacks_of, "alerts": alerts_of}


def readable_tables(client) -> list[str]:
    """Jev's tables in `client`'s current database that hold rows (MergeTree family) and have a tenant column."""
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree' "
        "AND name IN {names:Array(String)} AND name IN (SELECT table FROM system.columns "
        "WHERE database = currentDatabase() AND name = 'tenant')", parameters={"names": list(JEV_TABLES)})
    return sorted(r[0] for r in rows.result_rows)


def export(client, tenant: str | None, folder: Path, limits: Limits, to_file: bool = False) -> list[str]:
    """Write <table>.sql (its definition) and <table>.native (the caller's rows) for every readable table;
    `tenant` None = every tenant (the admin scope). The only queries that touch the owner's engine for a
    caller, fixed text with the tenant as a parameter, on one thread. `to_file` (an embedded engine only): the
    engine writes each file itself (INTO OUTFILE), so the rows are never copied through Python."""
    from infra.clickhouse.access import literal  # here, not at the top: the sandbox child starts without it

    tables = readable_tables(client)
    definitions = dict(client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = currentDatabase() "
        "AND name IN {names:Array(String)}", parameters={"names": tables}).result_rows)
    for table in tables:
        ddl = re.sub(r"^CREATE TABLE \S+?\.", "CREATE TABLE ", definitions[table])
        (folder / f"{table}.sql").write_text(ddl)
        where, params = ("WHERE tenant = {tenant:String}", {"tenant": tenant}) if tenant is not None else ("", {})
        settings = {"max_threads": 1, "max_memory_usage": limits.memory_mb << 20, "os_thread_priority": 19}
        target = folder / f"{table}.native"
        if to_file:
            client.command(f"SELECT * FROM {table} {where} INTO OUTFILE {literal(str(target))} FORMAT Native",
                           parameters=params, settings=settings)
        else:
            target.write_bytes(client.raw_query(f"SELECT * FROM {table} {where}", parameters=params, fmt="Native",
                                                settings=settings))
    return tables


def lower_self(parent: int) -> None:
    """First thing in the child: the idle CPU class (it runs only on CPU time the pipeline leaves; nice 19 where
    the scheduler has no idle class), and death with its parent (exit now if the parent is already gone). Done
    here rather than in a preexec_fn, so the parent spawns the child without forking its own large heap."""
    from infra.broker import die_with_parent

    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.nice(19)
    die_with_parent()
    if os.getppid() != parent:
        sys.exit(1)


class Snapshots:
    """Exported rows per scope (a tenant, or every tenant), reused by the calls of the next `max_age_s`
    seconds: under a stream of calls the owner exports each scope at most once per window, so its engine does
    little for the callers (JEV_QUERY_SNAPSHOT_S; answers are that much behind the newest rows). Each call
    hard-links the files into its own folder, so a snapshot replaced meanwhile is never pulled from under it."""

    def __init__(self, max_age_s: float, max_scopes: int = 16, to_file: bool = False):
        self.max_age_s, self.max_scopes, self.to_file = max_age_s, max_scopes, to_file
        self.root: Path | None = None  # made on the first export, removed by close()
        self.entries: dict[str | None, tuple[float, Path, list[str]]] = {}
        self.locks: dict[str | None, threading.Lock] = {}
        self.lock = threading.Lock()

    def take(self, client, tenant: str | None, limits: Limits, into: Path) -> list[str]:
        """Link `tenant`'s snapshot files (exported now when none is fresh) into `into`; returns the tables."""
        with self.lock:
            scope_lock = self.locks.setdefault(tenant, threading.Lock())
        with scope_lock:
            entry = self.entries.get(tenant)
            if entry is None or time.monotonic() - entry[0] >= self.max_age_s:
                with self.lock:
                    if self.root is None:
                        self.root = Path(tempfile.mkdtemp(prefix="jev-snapshots-", dir=scratch()))
                        self.root.chmod(0o700)
                folder = Path(tempfile.mkdtemp(dir=self.root))
                entry = (time.monotonic(), folder, export(client, tenant, folder, limits, self.to_file))
                with self.lock:
                    stale = [self.entries.pop(tenant, None)]
                    self.entries[tenant] = entry
                    while len(self.entries) > self.max_scopes:
                        stale.append(self.entries.pop(min(self.entries, key=lambda k: self.entries[k][0])))
                for old in stale:
                    if old is not None:
                        shutil.rmtree(old[1], ignore_errors=True)
            for file in entry[1].iterdir():
                try:
                    os.link(file, into / file.name)
                except OSError:  # another file system: a copy
                    shutil.copyfile(file, into / file.name)
            return entry[2]

    def close(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


class Pauser:
    """Running sandboxes, paused (SIGSTOP) while the pipeline has requests in flight and resumed (SIGCONT) when
    it has none: `in_flight` (streams.inflight.InFlight) tells when. Even in the idle CPU class a sandbox slowed
    decisions on a 2-core machine (its memory and caches, and the host's view of a busy CPU); stopped, it
    takes nothing. A paused sandbox's clock runs on: its query limit is wall time.

    A pipeline that is never idle would starve every query until its time limit: so while paused, the
    sandboxes still run `min_share` of each `period_s` (JEV_QUERY_MIN_SHARE), a slice at the end of the period."""

    def __init__(self, in_flight, min_share: float = 0.0, period_s: float = 1.0):
        if not 0 <= min_share < 1:
            raise ValueError(f"min share must be in [0, 1), got {min_share}: set JEV_QUERY_MIN_SHARE")
        self.in_flight, self.procs, self.paused, self.stopped = in_flight, set(), False, False
        self.min_share, self.period_s = min_share, period_s
        self.lock = threading.Lock()
        self.closed = threading.Event()
        in_flight.subscribe(self.on_change)
        if min_share > 0:
            threading.Thread(target=self._slices, daemon=True, name="jev-sandbox-slices").start()

    def on_change(self, busy: bool) -> None:
        with self.lock:
            self.paused = busy
            self._stop(busy)

    def _stop(self, stop: bool) -> None:
        """Stop or resume every sandbox (the caller holds the lock)."""
        if stop != self.stopped:
            self.stopped = stop
            for proc in self.procs:
                proc.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)

    def _slices(self) -> None:
        while not self.closed.wait(self.period_s * (1 - self.min_share)):
            with self.lock:
                if not (self.paused and self.procs):
                    continue
                self._stop(False)
            if self.closed.wait(self.period_s * self.min_share):
                return
            with self.lock:
                self._stop(self.paused)
            self.in_flight.busy()  # holds that expired while nothing looked end here

    def add(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.add(proc)
            if self.stopped:
                proc.send_signal(signal.SIGSTOP)
        self.in_flight.busy()  # holds that expired while nothing looked end here

    def remove(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.discard(proc)

    def close(self) -> None:
        self.closed.set()
        self.in_flight.unsubscribe(self.on_change)
        self.on_change(False)


def scratch() -> str | None:
    """Where sandboxes keep their engine: memory-backed /dev/shm when there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run(client, endpoint: str, body: dict, tenant: str | None, limits: Limits,
        cancelled: threading.Event | None = None, snapshots: Snapshots | None = None,
        pauser: Pauser | None = None) -> dict:
    """`endpoint`'s answer to `body`, computed in a fresh sandbox that holds `tenant`'s rows of `client` (every
    tenant's for None or "*"), exported now or taken from `snapshots`, paused by `pauser` while the pipeline is
    busy. Raises QueryFailed with a message safe for the caller."""
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    tenant = None if tenant in (None, "", tenancy.ADMIN) else tenant
    with tempfile.TemporaryDirectory(prefix="jev-sandbox-", dir=scratch()) as work:
        folder = Path(work)
        folder.chmod(0o700)
        tables = snapshots.take(client, tenant, limits, folder) if snapshots else export(client, tenant, folder, limits)
        (folder / "spec.json").write_bytes(orjson.dumps({"endpoint": endpoint, "body": body, "tables": tables,
                                                         "limits": dataclasses.asdict(limits)}))
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": work, "LANG": "C.UTF-8",
               "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
               **{k: v for k, v in os.environ.items() if k.startswith(INDEX_SETTINGS)}}
        proc = subprocess.Popen([sys.executable, "-m", "workers.analytics.sandbox", work, str(os.getpid())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                cwd=work)
        deadline = time.monotonic() + limits.time_s + LOAD_ALLOWANCE_S
        if pauser is not None:
            pauser.add(proc)
        try:
            while proc.poll() is None:
                if pauser is not None:
                    pauser.in_flight.busy()  # a hold that expired resumes the sandboxes
                if cancelled is not None and cancelled.is_set():
                    raise QueryFailed("cancelled: the caller went away")
                if time.monotonic() > deadline:
                    raise QueryFailed(f"stopped after {limits.time_s + LOAD_ALLOWANCE_S:.0f} s (JEV_QUERY_TIME_S="
                                      f"{limits.time_s:g} plus loading); narrow --since or the query")
                (cancelled or threading.Event()).wait(POLL_S)
        finally:
            if pauser is not None:
                pauser.remove(proc)
            if proc.poll() is None:
                proc.kill()
            out, err = proc.communicate()
    lines = out.strip().splitlines()
    if not lines:
        raise QueryFailed(f"the query sandbox exited with code {proc.returncode} and no answer"
                          + (f" ({public_error(RuntimeError(err.decode(errors='replace').strip().splitlines()[-1]))})"
                             if err.strip() else ""))
    answer = orjson.loads(lines[-1])
    if "error" in answer:
        raise QueryFailed(answer["error"])
    return answer["result"]


def serve(work: Path) -> dict:
    """The child: load the exported tables into a private engine, run the endpoint, return its answer."""
    import clickhouse_connect

    spec = orjson.loads((work / "spec.json").read_bytes())
    limits = Limits(**spec["limits"])
    client = clickhouse_connect.get_client(dsn=f"chdb://{work / 'engine'}")
    for table in spec["tables"]:
        client.command((work / f"{table}.sql").read_text())
        native = work / f"{table}.native"
        data = native.read_bytes()
        native.unlink()
        if data:
            client.raw_insert(table, insert_block=data, fmt="Native", settings={"max_partitions_per_insert_block": 0})
    try:
        return {"result": ENDPOINTS[spec["endpoint"]](Limited(client, limits), spec["body"])}
    except tenancy.Refused as e:
        return {"error": str(e)}
    except ValueError as e:
        return {"error": str(e) if "DB::Exception" not in str(e) else public_error(e)}
    except Exception as e:
        return {"error": public_error(e)}


if __name__ == "__main__":
    lower_self(int(sys.argv[2]))
    sys.stdout.buffer.write(orjson.dumps(serve(Path(sys.argv[1])), default=str) + b"\n")
