"""`jev config`: the settings in effect and the env var behind each, section by section."""

from __future__ import annotations

import sys

import orjson

from streams.security.logsafe import MASK, redact
from streams.settings import SECTIONS, describe


def register(sub) -> None:
    p = sub.add_parser("config", help="show settings (JEV_* env vars) and their values, by section")
    p.add_argument("--json", action="store_true", help="print JSON, keyed by section, instead of tables")
    p.add_argument("--section", help=f"show one section: {', '.join(SECTIONS)}")
    p.set_defaults(func=run)


SECRET = {"JEV_METRICS_TOKEN"}  # settings that are a secret whole; the others have their passwords masked


def shown(variable: str, value: str) -> str:
    """A setting's value as printed: a secret setting masked whole, a DSN or URL with its password masked."""
    if variable in SECRET and value:
        return MASK
    return redact(value)


def run(args, settings) -> int:
    if args.section is not None and args.section not in SECTIONS:
        print(f"jev config: no section {args.section!r}; the sections are {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    by_section: dict[str, list[tuple[str, str, str]]] = {}
    for section, variable, value, doc in describe(settings):
        if args.section in (None, section):
            by_section.setdefault(section, []).append((variable, shown(variable, value), doc))
    if args.json:
        print(orjson.dumps({s: {v: value for v, value, _ in rows} for s, rows in by_section.items()}).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for section, rows in by_section.items():
        table = Table("variable", "value", "meaning", title=f"{section}: {SECTIONS[section]}", title_justify="left")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    return 0
