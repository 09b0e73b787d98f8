"""ClickHouse access: the real engine in-process (chdb://DIR) or a server (http://…), same client API.

DDL lives in migrations/NNN_name.sql, applied in order at start-up and recorded in schema_migrations,
so applying twice is a no-op.
"""

from __future__ import annotations

import fcntl
import os
import re
from importlib import resources
from pathlib import Path

import clickhouse_connect

from schemas.records import UsageEvent
from schemas.tables import USAGE_TABLES

USAGE_COLUMNS = list(UsageEvent.__annotations__)  # usage_events' columns: the UsageEvent record's fields, in order


class DataDirBusy(RuntimeError):
    """Another process owns the embedded engine's data directory."""


def data_dir_locked(dsn: str) -> bool:
    """True when another process holds the embedded engine's data directory: its `status` file is locked
    (ClickHouse takes an exclusive flock on it for as long as it runs). A server DSN is never locked."""
    if not dsn.startswith("chdb://"):
        return False
    status = Path(dsn.removeprefix("chdb://")) / "status"
    try:
        fd = os.open(status, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock taken here
    return False


def connect(dsn: str):
    if dsn.startswith("chdb://"):
        Path(dsn.removeprefix("chdb://")).mkdir(parents=True, exist_ok=True)
    try:
        return clickhouse_connect.get_client(dsn=dsn)
    except Exception:
        if data_dir_locked(dsn):
            raise DataDirBusy(
                f"{dsn} is owned by another running process (a `jev demo` or worker): stop it, "
                f"or set JEV_CLICKHOUSE_DSN to a ClickHouse server both can reach"
            ) from None
        raise


def statements(sql: str) -> list[str]:
    """A migration's statements: comment lines dropped, split at a `;` that ends a line."""
    code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*$", code, flags=re.M) if s.strip()]


def migrations() -> list[tuple[str, str]]:
    folder = resources.files("infra.clickhouse").joinpath("migrations")
    return sorted((f.name.removesuffix(".sql"), f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql"))


def migrate(client) -> list[str]:
    """Apply the migrations not applied yet; returns their names."""
    client.command(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name String, applied_at DateTime DEFAULT now()) "
        "ENGINE = ReplacingMergeTree ORDER BY name"
    )
    done = {row[0] for row in client.query("SELECT name FROM schema_migrations").result_rows}
    applied = []
    for name, sql in migrations():
        if name in done:
            continue
        for statement in statements(sql):
            client.command(statement)
        client.insert("schema_migrations", [[name]], column_names=["name"])
        applied.append(name)
    return applied


def set_ttl(client, days: int) -> None:
    """Keep usage rows `days` days (0 = forever); the aggregate tables keep their own history."""
    has_ttl = (
        " TTL "
        in client.query(
            "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = 'usage_events'"
        ).result_rows[0][0]
    )
    if days > 0:
        client.command(f"ALTER TABLE usage_events MODIFY TTL toDateTime(ts) + INTERVAL {int(days)} DAY")
    elif has_ttl:
        client.command("ALTER TABLE usage_events REMOVE TTL")


REQUEST_TEXTS = """CREATE TABLE IF NOT EXISTS request_texts
(
    request_id String,
    ts DateTime64(3),
    tenant LowCardinality(String),
    service LowCardinality(String),
    decision_type LowCardinality(String),
    session_id String,
    state String,
    history String,
    candidates String,
    variables String
)
ENGINE = ReplacingMergeTree
PARTITION BY toDate(ts)
ORDER BY (tenant, request_id)
TTL toDateTime(ts) + INTERVAL {days} DAY"""


def keep_request_texts(client, days: int) -> None:
    """Opt-in raw request text (JEV_RAW_TEXT_DAYS): create request_texts with a TTL of `days` days, or move an
    existing table's TTL to `days`. Never called with 0: then no table is made and nothing is stored (rows an
    earlier opt-in stored still expire under the TTL they were written with)."""
    if days <= 0:
        raise ValueError(f"raw text retention of {days} days: set JEV_RAW_TEXT_DAYS to 1 or more, or leave it 0")
    client.command(REQUEST_TEXTS.format(days=int(days)))
    client.command(f"ALTER TABLE request_texts MODIFY TTL toDateTime(ts) + INTERVAL {int(days)} DAY")


def open_migrated(dsn: str, ttl_days: int = 0):
    client = connect(dsn)
    migrate(client)
    set_ttl(client, ttl_days)
    return client


def truncate_usage(client) -> None:
    """Empty usage_events and its aggregates (a fresh demo run); the schema stays."""
    for table in USAGE_TABLES:
        client.command(f"TRUNCATE TABLE IF EXISTS {table}")
