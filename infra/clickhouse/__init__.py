"""ClickHouse access: the real engine in-process (chdb://DIR) or a server (http://…), same client API.

DDL lives in migrations/NNN_name.sql, applied in order at start-up and recorded in schema_migrations,
so applying twice is a no-op.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import clickhouse_connect

USAGE_COLUMNS = ["event_id", "request_id", "ts", "tenant", "service", "business_line", "session_id", "user_id",
                 "decision_type", "stage", "stack", "model", "input_tokens", "cache_read_tokens", "output_tokens",
                 "nominal_tokens", "candidates", "beam", "iteration", "latency_ms", "cost", "outcome",
                 "business_event"]


def connect(dsn: str):
    if dsn.startswith("chdb://"):
        Path(dsn.removeprefix("chdb://")).mkdir(parents=True, exist_ok=True)
    return clickhouse_connect.get_client(dsn=dsn)


def migrations() -> list[tuple[str, str]]:
    folder = resources.files("infra.clickhouse").joinpath("migrations")
    return sorted((f.name.removesuffix(".sql"), f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql"))


def migrate(client) -> list[str]:
    """Apply the migrations not applied yet; returns their names."""
    client.command("CREATE TABLE IF NOT EXISTS schema_migrations (name String, applied_at DateTime DEFAULT now()) "
                   "ENGINE = ReplacingMergeTree ORDER BY name")
    done = {row[0] for row in client.query("SELECT name FROM schema_migrations").result_rows}
    applied = []
    for name, sql in migrations():
        if name in done:
            continue
        code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        for statement in filter(None, (s.strip() for s in code.split(";"))):
            client.command(statement)
        client.insert("schema_migrations", [[name]], column_names=["name"])
        applied.append(name)
    return applied


def open_migrated(dsn: str):
    client = connect(dsn)
    migrate(client)
    return client
