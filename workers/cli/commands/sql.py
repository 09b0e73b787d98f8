"""`jev sql "SELECT …"`: read-only SQL on the usage tables, for analysts."""

from __future__ import annotations

import sys
import time

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "sql",
        help="run a read-only SQL query on ClickHouse (usage_events, usage_by_*)",
        description="Runs on settings.clickhouse, in a sandbox process that holds only the rows "
        "the caller may read, read-only and under JEV_QUERY_TIME_S / JEV_QUERY_MEMORY_MB. "
        "With the embedded engine, when a running pipeline owns the data directory, the "
        "query goes to that process.",
    )
    p.add_argument("query", help='e.g. "SELECT sum(input_tokens + output_tokens) FROM usage_events"')
    p.add_argument(
        "--tenant",
        default="",
        help="read only this tenant's rows (the sandbox holds no other); any "
        "caller runs one SELECT on Jev's usage tables, without SETTINGS, "
        "table functions or system tables",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per row, then a summary line")
    p.set_defaults(func=run)


def query(settings, sql: str, tenant: str = "") -> dict:
    """{"columns", "rows", "via"}: in this process when the data directory is free, else in its owner."""
    from workers.analytics import owner

    result, via = owner.answer(settings, "query", {"sql": sql, "tenant": tenant})
    return {**result, "via": via}


def run(args, settings) -> int:
    started = time.perf_counter()
    try:
        result = query(settings, args.query, args.tenant)
    except Exception as e:
        print(f"jev sql: {e}", file=sys.stderr)
        return 2
    elapsed = round(time.perf_counter() - started, 3)
    if args.json:
        for row in result["rows"]:
            print(orjson.dumps(dict(zip(result["columns"], row)), default=str).decode())
        print(
            orjson.dumps(
                {"rows": len(result["rows"]), "columns": result["columns"], "via": result["via"], "elapsed_s": elapsed}
            ).decode()
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(*result["columns"])
    for row in result["rows"]:
        table.add_row(*(str(v) for v in row))
    Console().print(table)
    print(f"{len(result['rows'])} rows in {elapsed} s ({result['via']})", file=sys.stderr)
    return 0
