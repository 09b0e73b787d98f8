"""Tenant isolation for every query surface (`jev sql`, `jev report`, `jev flamegraph` and the owner's endpoints).

A tenant-scoped caller queries through TenantClient. Every query it runs, the caller's own SQL and the
report's and flame graph's, passes three gates before it reads a row:
1. ClickHouse's parser (EXPLAIN AST, which reads nothing): one SELECT, no SETTINGS or FORMAT clause, no table
   function, no function that reads outside the tables (file, dictGet, joinGet), and every table or identifier
   that names a table names one with a tenant column (usage_events, usage_by_*; no system or other database).
2. ClickHouse's analyzer (EXPLAIN QUERY TREE, run with the filter of step 3): every table the query resolves
   to, through CTEs, subqueries, UNION, JOIN and `IN table`, is one with a tenant column.
3. The query runs with `additional_table_filters` = {table: tenant = <the tenant>} for every such table, so
   ClickHouse itself drops other tenants' rows wherever the table is read. Step 1 refusing SETTINGS is what
   keeps the query text from replacing this filter (chdb has no per-query readonly; see owner.check_read_only).
"""
from __future__ import annotations

import functools
import os
import re
import stat
from pathlib import Path

import orjson

ADMIN = "*"  # the scope of a token that reads every tenant
BLOCKED_FUNCTIONS = ("file", "catboostevaluate")  # scalar functions that read outside the tables
BLOCKED_PREFIXES = ("dict", "joinget")  # dictGet*, dictHas, joinGet*: read dictionaries and Join tables
NODE = re.compile(r"^(\w+)(?: (.*?))?(?: \(alias .*\))?(?: \(children \d+\))?$")


class Refused(ValueError):
    """A tenant-scoped query that could read outside the tenant's rows."""


def catalog(client) -> tuple[str, set[str], set[str], set[str]]:
    """(current database, every database, tables and views there (temporary ones too), those with a tenant
    column that hold rows: MergeTree-family tables, not views)."""
    rows = client.query(
        "SELECT currentDatabase(), name, engine LIKE '%MergeTree' AND name IN (SELECT table FROM system.columns "
        "WHERE database = currentDatabase() AND name = 'tenant') FROM system.tables "
        "WHERE database = currentDatabase() OR is_temporary").result_rows
    databases = {r[0] for r in client.query("SELECT name FROM system.databases").result_rows}
    current = rows[0][0] if rows else client.query("SELECT currentDatabase()").result_rows[0][0]
    return current, databases, {r[1] for r in rows}, {r[1] for r in rows if r[2]}


def table_functions(client) -> set[str]:
    """Lower-case names of the table functions that are not also scalar functions (those would be `format`)."""
    return {r[0].lower() for r in client.query(
        "SELECT name FROM system.table_functions WHERE name NOT IN (SELECT name FROM system.functions)").result_rows}


def check_ast(ast: str, current: str, databases: set[str], tables: set[str], tenant_tables: set[str],
              functions: set[str]) -> None:
    """Gate 1 on EXPLAIN AST output (one node per line: `Kind name (alias a) (children n)`)."""
    lines = ast.splitlines()
    if not lines or lines[0].strip() != "SelectWithUnionQuery (children 1)":
        raise Refused("a tenant may run one SELECT (or WITH … SELECT) without FORMAT or INTO OUTFILE")
    for line in lines:
        m = NODE.match(line.strip())
        if not m:
            continue
        kind, name = m.group(1), (m.group(2) or "")
        if kind == "Set":
            raise Refused("a tenant's query may not change settings (SETTINGS clause)")
        if kind == "Function" and (name.lower() in functions or name.lower() in BLOCKED_FUNCTIONS
                                   or name.lower().startswith(BLOCKED_PREFIXES)):
            raise Refused(f"a tenant's query may not call {name}(): it reads outside the usage tables")
        if kind in ("TableIdentifier", "Identifier"):
            parts = name.split(".")
            if len(parts) > 1 and parts[0] in databases:
                if parts[0] != current:
                    raise Refused(f"a tenant's query may not read database {parts[0]!r}: only the usage tables")
                parts = parts[1:]
            if parts[0] in tables and parts[0] not in tenant_tables:
                raise Refused(f"a tenant's query may not read {parts[0]!r}: it has no tenant column; "
                              f"readable tables: {', '.join(sorted(tenant_tables))}")


def check_tree(tree: str, current: str, tenant_tables: set[str]) -> None:
    """Gate 2 on EXPLAIN QUERY TREE output: every resolved table is a tenant table (or system.one, the
    one-row table a SELECT without FROM reads)."""
    if "TABLE_FUNCTION" in tree:
        raise Refused("a tenant's query may not use table functions")
    allowed = {f"{current}.{t}" for t in tenant_tables} | {"system.one"}
    for name in re.findall(r"\btable_name: (.+?)(?:, |$)", tree, flags=re.M):
        if name not in allowed:
            raise Refused(f"a tenant's query may not read {name}: only tables with a tenant column")


def filters(tenant: str, tenant_tables: set[str]) -> str:
    """The additional_table_filters value. The tenant travels as byte codes, char(116, 48) for 't0': no quote
    in the condition, so no tenant name can break out of it, and the map's own quoting stays one level deep."""
    condition = f"tenant = char({', '.join(str(b) for b in tenant.encode())})"
    return "{" + ", ".join(f"'{t}': '{condition}'" for t in sorted(tenant_tables)) + "}"


class TenantClient:
    """The client of one tenant: `query` as clickhouse-connect's, on that tenant's rows only."""

    def __init__(self, client, tenant: str):
        if not tenant or tenant == ADMIN:
            raise ValueError(f"tenant {tenant!r}: name one tenant")
        self.client, self.tenant = client, tenant

    @functools.cached_property
    def catalog(self) -> tuple:
        """What the checks compare names with, read once per TenantClient (one call: one request or report)."""
        return *catalog(self.client), table_functions(self.client)

    def query(self, sql: str, parameters: dict | None = None, settings: dict | None = None):
        current, databases, tables, tenant_tables, functions = self.catalog
        check_ast(self.explain("AST", sql, parameters), current, databases, tables, tenant_tables, functions)
        scoped = {**(settings or {}), "additional_table_filters": filters(self.tenant, tenant_tables)}
        check_tree(self.explain("QUERY TREE", sql, parameters, scoped), current, tenant_tables)
        return self.client.query(sql, parameters=parameters, settings=scoped)

    def explain(self, kind: str, sql: str, parameters: dict | None, settings: dict | None = None) -> str:
        """EXPLAIN's text. A command, not a query: a query's appended FORMAT clause would join the explained
        SELECT; a command's output comes back as TabSeparated text (a list where a name holds a tab)."""
        out = self.client.command(f"EXPLAIN {kind} {sql}", parameters=parameters, settings=settings)
        return "\t".join(out) if isinstance(out, list) else str(out)


def scoped(client, tenant: str | None):
    """`client` itself for the admin scope (no tenant), else a TenantClient."""
    return TenantClient(client, tenant) if tenant and tenant != ADMIN else client


def load_tokens(path: str) -> dict[str, str]:
    """{bearer token: tenant or "*"} from a JSON file (mode 0600); empty path → no extra tokens."""
    if not path:
        return {}
    file = Path(path)
    if not file.exists():
        raise SystemExit(f"JEV_QUERY_TOKENS={path}: no such file; write {{\"<token>\": \"<tenant or *>\"}} there")
    if stat.S_IMODE(os.stat(file).st_mode) & 0o077:
        raise SystemExit(f"JEV_QUERY_TOKENS={path} is readable by other users: chmod 600 {path}")
    try:
        tokens = orjson.loads(file.read_bytes())
    except orjson.JSONDecodeError as e:
        raise SystemExit(f"JEV_QUERY_TOKENS={path}: not JSON ({e}); expected {{\"<token>\": \"<tenant or *>\"}}")
    if not isinstance(tokens, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                               for k, v in tokens.items()):
        raise SystemExit(f"JEV_QUERY_TOKENS={path}: expected {{\"<token>\": \"<tenant or *>\"}}")
    short = [k for k in tokens if len(k) < 16]
    if short:
        raise SystemExit(f"JEV_QUERY_TOKENS={path}: {len(short)} token(s) shorter than 16 characters; make them "
                         "with python -c 'import secrets; print(secrets.token_urlsafe(24))'")
    return tokens
