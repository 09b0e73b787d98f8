"""`jev config`: the settings in effect and the env var behind each."""

from __future__ import annotations

import orjson

from streams.security.logsafe import MASK, redact
from streams.settings import describe


def register(sub) -> None:
    p = sub.add_parser("config", help="show settings (JEV_* env vars) and their values")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


SECRET = {"JEV_METRICS_TOKEN"}  # settings that are a secret whole; the others have their passwords masked


def shown(variable: str, value: str) -> str:
    """A setting's value as printed: a secret setting masked whole, a DSN or URL with its password masked."""
    if variable in SECRET and value:
        return MASK
    return redact(value)


def run(args, settings) -> int:
    rows = [(variable, shown(variable, value), doc) for variable, value, doc in describe(settings)]
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
