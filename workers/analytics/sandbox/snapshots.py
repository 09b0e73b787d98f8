"""The caller's rows out of the owner's engine: one fixed export per readable table (the registry's
schemas.tables.TENANT_TABLES), the definitions of the views over them (TENANT_VIEWS), and the snapshots that
let a stream of calls share one export per scope."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

from schemas.tables import TENANT_TABLES, TENANT_VIEWS
from workers.analytics.sandbox.limits import Limits


def scratch() -> str | None:
    """Where sandboxes keep their engine: memory-backed /dev/shm when there is one."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def readable_tables(client) -> list[str]:
    """The registry's tenant tables in `client`'s current database that hold rows (MergeTree family) and have a
    tenant column, then its views over them, in registry order (a view may read one before it)."""
    rows = client.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND ((engine LIKE '%MergeTree' "
        "AND name IN {tables:Array(String)} AND name IN (SELECT table FROM system.columns "
        "WHERE database = currentDatabase() AND name = 'tenant')) OR (engine = 'View' AND name IN "
        "{views:Array(String)}))",
        parameters={"tables": list(TENANT_TABLES), "views": list(TENANT_VIEWS)},
    )
    found = {r[0] for r in rows.result_rows}
    return [name for name in (*TENANT_TABLES, *TENANT_VIEWS) if name in found]


def export(client, tenant: str | None, folder: Path, limits: Limits, to_file: bool = False) -> list[str]:
    """Write <table>.sql (its definition) and <table>.native (the caller's rows) for every readable table, and
    <view>.sql for every view over them; `tenant` None = every tenant (the admin scope). The only queries that
    touch the owner's engine for a caller, fixed text with the tenant as a parameter, on one thread. `to_file`
    (an embedded engine only): the engine writes each file itself (INTO OUTFILE), so the rows are never copied
    through Python. Returns the names in the order the sandbox creates them."""
    from infra.clickhouse.access import literal  # here, not at the top: the sandbox child starts without it

    names = readable_tables(client)
    database, definitions = None, {}
    for name, ddl, db in client.query(
        "SELECT name, create_table_query, database FROM system.tables WHERE database = currentDatabase() "
        "AND name IN {names:Array(String)}",
        parameters={"names": names},
    ).result_rows:
        database, definitions[name] = db, ddl
    own = re.compile(rf"\b{re.escape(database or '')}\.(?=(?:{'|'.join(names)})\b)") if names else None
    for name in names:
        (folder / f"{name}.sql").write_text(own.sub("", definitions[name]))
        if name in TENANT_VIEWS:
            continue
        where, params = ("WHERE tenant = {tenant:String}", {"tenant": tenant}) if tenant is not None else ("", {})
        settings = {"max_threads": 1, "max_memory_usage": limits.memory_mb << 20, "os_thread_priority": 19}
        target = folder / f"{name}.native"
        if to_file:
            client.command(
                f"SELECT * FROM {name} {where} INTO OUTFILE {literal(str(target))} FORMAT Native",
                parameters=params,
                settings=settings,
            )
        else:
            target.write_bytes(
                client.raw_query(f"SELECT * FROM {name} {where}", parameters=params, fmt="Native", settings=settings)
            )
    return names


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
