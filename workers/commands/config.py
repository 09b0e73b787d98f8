"""`jev config`: the settings in effect and the env var behind each."""
from __future__ import annotations

import orjson

from streams.settings import describe


def register(sub) -> None:
    p = sub.add_parser("config", help="show settings (JEV_* env vars) and their values")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    rows = describe(settings)
    if args.json:
        print(orjson.dumps({k: v for k, v, _ in rows}).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("variable", "value", "meaning")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    return 0
