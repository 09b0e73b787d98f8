"""Who reads what on the query surfaces, and the parse gate every caller's own SQL passes.

Isolation itself is by construction (workers/analytics/sandbox/). Before a caller's SQL runs there, check_query
parses it with ClickHouse (EXPLAIN AST, which reads nothing) and refuses more than one SELECT, SETTINGS or FORMAT
clauses, table functions, any function but those that compute on the values read (so nothing reads the server, the
machine, a file or a dictionary: version(), hostName(), filesystemAvailable(), file(), dictGet()), and any table
that is not one of Jev's.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import orjson

from schemas.tables import TENANT_TABLES, TENANT_VIEWS

ADMIN = "*"  # the scope of a token that reads every tenant
# The functions a caller's SQL may call: every aggregate (with its combinators: sumIf, uniqMerge, count(DISTINCT))
# and the system.functions categories that compute on the values read. The categories left out (Other,
# Introspection, Dictionary, Embedded Dictionary, AI, Machine Learning, Encryption, Internal) hold what reads the
# server, the machine, files, dictionaries or the network.
CATEGORIES = frozenset(
    (
        "Arithmetic, Arrays, Bit, Bitmap, Comparison, Conditional, Dates and Times, Distance, Encoding, Financial, "
        "Geo, Geo Polygon, Hash, IP Address, JSON, Logical, Map, Mathematical, Null, NumericIndexedVector, QBit, "
        "Random Number, Rounding, String, String Replacement, String Search, String Splitting, Time Series, "
        "Time Window, Tuple, Type Conversion, URL, UUID"
    ).split(", ")
)
VALUE_FUNCTIONS = frozenset(  # those of category Other that compute on values only
    (
        "bar transform throwIf finalizeAggregation initializeAggregation runningAccumulate runningDifference "
        "runningDifferenceStartingWithFirstValue neighbor rowNumberInBlock rowNumberInAllBlocks blockNumber "
        "formatReadableSize formatReadableDecimalSize formatReadableQuantity formatReadableTimeDelta "
        "parseReadableSize parseReadableSizeOrNull parseReadableSizeOrZero parseTimeDelta parseISO8601Duration "
        "toTypeName toColumnTypeName byteSize visibleWidth countDigits isDecimalOverflow identity materialize "
        "ignore isConstant getSubcolumn variantElement variantType MACNumToString MACStringToNum MACStringToOUI"
    ).split()
)
SERVER_FUNCTIONS = frozenset(("timezone", "serverTimezone"))  # in an allowed category, yet read the server's setting
SYNTAX = frozenset(("lambda", "exists", "grouping", "caseWithExpression"))  # parse nodes, not catalog functions
ALLOWED = (
    f"aggregates and functions over values: the categories {', '.join(sorted(CATEGORIES))} of system.functions "
    f"(but {', '.join(sorted(SERVER_FUNCTIONS))}), and {', '.join(sorted(VALUE_FUNCTIONS))}"
)
NODE = re.compile(r"^(\w+)(?: (.*?))?(?: \(alias .*\))?(?: \(children \d+\))?$")


class Refused(ValueError):
    """A tenant-scoped query that could read outside the tenant's rows."""


def catalog(client) -> tuple[str, set[str], set[str], set[str]]:
    """(current database, every database, tables and views there (temporary ones too), those a tenant reads:
    the registry's tenant tables (MergeTree family, with a tenant column) and its views over them, which in a
    sandbox hold the caller's rows only)."""
    rows = client.query(
        "SELECT currentDatabase(), name, (engine LIKE '%MergeTree' AND name IN {tables:Array(String)} AND name IN "
        "(SELECT table FROM system.columns WHERE database = currentDatabase() AND name = 'tenant')) OR "
        "(engine = 'View' AND name IN {views:Array(String)}) FROM system.tables "
        "WHERE database = currentDatabase() OR is_temporary",
        parameters={"tables": list(TENANT_TABLES), "views": list(TENANT_VIEWS)},
    ).result_rows
    databases = {r[0] for r in client.query("SELECT name FROM system.databases").result_rows}
    current = rows[0][0] if rows else client.query("SELECT currentDatabase()").result_rows[0][0]
    return current, databases, {r[1] for r in rows}, {r[1] for r in rows if r[2]}


@dataclass(frozen=True)
class Functions:
    """The engine's function catalog: {name: (canonical name, category, is aggregate)}, an alias under its
    target's entry and a case-insensitive name under its lower case too; the aggregate combinators; and the
    lower-case names of the table functions that are not also scalar functions (those would be `format`). One
    scan of system.functions (it builds every function's documentation: the costly part of the gate)."""

    catalog: dict[str, tuple[str, str, bool]]
    combinators: tuple[str, ...]
    tables: frozenset[str]

    @classmethod
    def of(cls, client) -> Functions:
        rows = client.query(
            "SELECT name, case_insensitive, alias_to, categories, is_aggregate FROM system.functions"
        ).result_rows
        targets = {name: (name, category, bool(aggregate)) for name, _, alias, category, aggregate in rows if not alias}
        catalog: dict[str, tuple[str, str, bool]] = {}
        for name, insensitive, alias, _, _ in rows:
            if (entry := targets.get(alias or name)) is not None:
                catalog[name] = entry
                if insensitive:
                    catalog.setdefault(name.lower(), entry)
        combinators = client.query("SELECT name FROM system.aggregate_function_combinators").result_rows
        tables = client.query("SELECT name FROM system.table_functions").result_rows
        return cls(
            catalog, tuple(r[0] for r in combinators), frozenset(r[0].lower() for r in tables if r[0] not in catalog)
        )

    def entry(self, name: str) -> tuple[str, str, bool] | None:
        return self.catalog.get(name) or self.catalog.get(name.lower())

    def aggregate(self, name: str) -> bool:
        """An aggregate, or one with combinators (sumIf, uniqMerge, countDistinct)."""
        entry = self.entry(name)
        if entry is not None:
            return entry[2]
        return any(
            name.endswith(c) and len(name) > len(c) and self.aggregate(name[: -len(c)]) for c in self.combinators
        )

    def allowed(self, name: str) -> bool:
        if name in SYNTAX:
            return True
        entry = self.entry(name)
        if entry is None:
            return self.aggregate(name)
        canonical, category, aggregate = entry
        return canonical not in SERVER_FUNCTIONS and (
            aggregate or category in CATEGORIES or canonical in VALUE_FUNCTIONS
        )


def check_ast(
    ast: str,
    current: str,
    databases: set[str],
    tables: set[str],
    tenant_tables: set[str],
    functions: Functions,
) -> None:
    """The gate on EXPLAIN AST output (one node per line: `Kind name (alias a) (children n)`)."""
    lines = ast.splitlines()
    if not lines or lines[0].strip() != "SelectWithUnionQuery (children 1)":
        raise Refused("a query may be one SELECT (or WITH … SELECT) without FORMAT or INTO OUTFILE")
    for line in lines:
        m = NODE.match(line.strip())
        if not m:
            continue
        kind, name = m.group(1), (m.group(2) or "")
        if kind == "Set":
            raise Refused("a query may not change settings (SETTINGS clause)")
        if kind == "Function" and name.lower() in functions.tables:
            raise Refused(f"a query may not call {name}(): it reads outside the usage tables")
        if kind == "Function" and not functions.allowed(name):
            raise Refused(
                f"a query may not call {name}(): it is unknown or reads the server, the machine or outside the "
                f"usage tables; allowed are {ALLOWED}"
            )
        if kind in ("TableIdentifier", "Identifier"):
            parts = name.split(".")
            if len(parts) > 1 and parts[0] in databases:
                if parts[0] != current:
                    raise Refused(f"a query may not read database {parts[0]!r}: only the usage tables")
                parts = parts[1:]
            if parts[0] in tables and parts[0] not in tenant_tables:
                raise Refused(
                    f"a query may not read {parts[0]!r}: it has no tenant column; "
                    f"readable tables: {', '.join(sorted(tenant_tables))}"
                )


def check_query(client, sql: str, parameters: dict | None = None) -> None:
    """The parse gate on `client` (the sandbox's engine): raises Refused naming what the query may not do."""
    current, databases, tables, tenant_tables = catalog(client)
    try:
        out = client.command(f"EXPLAIN AST {sql}", parameters=parameters)
    except Exception as e:
        if "(READONLY)" in str(e):  # the engine's readonly=1 refused a SETTINGS clause while parsing
            raise Refused("a query may not change settings (SETTINGS clause)") from None
        raise
    ast = "\t".join(out) if isinstance(out, list) else str(out)
    check_ast(ast, current, databases, tables, tenant_tables, Functions.of(client))


def load_tokens(path: str) -> dict[str, str]:
    """{bearer token: tenant or "*"} from a JSON file (mode 0600); empty path → no extra tokens."""
    if not path:
        return {}
    file = Path(path)
    if not file.exists():
        raise SystemExit(f'JEV_QUERY_TOKENS={path}: no such file; write {{"<token>": "<tenant or *>"}} there')
    if stat.S_IMODE(os.stat(file).st_mode) & 0o077:
        raise SystemExit(f"JEV_QUERY_TOKENS={path} is readable by other users: chmod 600 {path}")
    try:
        tokens = orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as e:
        raise SystemExit(f'JEV_QUERY_TOKENS={path}: not JSON ({e}); expected {{"<token>": "<tenant or *>"}}') from None
    if not isinstance(tokens, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in tokens.items()
    ):
        raise SystemExit(f'JEV_QUERY_TOKENS={path}: expected {{"<token>": "<tenant or *>"}}')
    short = [k for k in tokens if len(k) < 16]
    if short:
        raise SystemExit(
            f"JEV_QUERY_TOKENS={path}: {len(short)} token(s) shorter than 16 characters; make them "
            "with python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )
    return tokens
