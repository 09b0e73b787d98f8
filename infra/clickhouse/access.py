"""Tenant isolation on a ClickHouse server: one user per tenant, row policies that show it its own rows only, and a
read-only settings profile with the query limits (the embedded engine has no access control: there every analytics
call runs in a sandbox, workers/analytics/sandbox/). Run what this prints once per change of the tenant list:

    python -m infra.clickhouse.access --tokens tokens.json --database jev | clickhouse-client --multiquery

Each tenant's user authenticates with its JEV_QUERY_TOKENS token (stored as its SHA-256), so a tenant holds one
secret for Jev's endpoints and the server; the admin users get a policy that shows every row.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys

from schemas.tables import TENANT_TABLES as TABLES  # row policies on every table a tenant reads rows of

PROFILE = "jev_tenant"


def literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def identifier(value: str) -> str:
    return "`" + value.replace("\\", "\\\\").replace("`", "\\`") + "`"


def user_of(tenant: str) -> str:
    """The tenant's ClickHouse user: jev_tenant_ + its name's letters and digits + a short hash (names that
    differ only in other characters stay apart)."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", tenant).strip("_")[:40]
    return f"jev_tenant_{slug}_{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def statements(
    tokens: dict[str, str],
    database: str,
    admins: tuple[str, ...] = ("default",),
    time_s: float = 30.0,
    memory_mb: int = 1024,
    threads: int = 1,
) -> list[str]:
    """The DDL: the read-only profile, per tenant a user (password = its token's SHA-256) with SELECT on Jev's
    tables and a row policy per table, and the admins' see-all policy."""
    out = [
        f"CREATE SETTINGS PROFILE OR REPLACE {PROFILE} SETTINGS readonly = 1 CONST, "
        f"max_execution_time = {float(time_s)} CONST, max_memory_usage = {int(memory_mb) << 20} CONST, "
        f"max_threads = {int(threads)} CONST, allow_ddl = 0 CONST, allow_introspection_functions = 0 CONST"
    ]
    tables = [f"{identifier(database)}.{identifier(t)}" for t in TABLES]
    for token, tenant in sorted(tokens.items(), key=lambda kv: kv[1]):
        if tenant == "*":
            continue
        user = identifier(user_of(tenant))
        digest = hashlib.sha256(token.encode()).hexdigest()
        out.append(
            f"CREATE USER OR REPLACE {user} IDENTIFIED WITH sha256_hash BY {literal(digest)} "
            f"SETTINGS PROFILE {literal(PROFILE)}"
        )
        out.append(f"GRANT SELECT ON {identifier(database)}.* TO {user}")
        for table, name in zip(tables, TABLES):
            out.append(
                f"CREATE ROW POLICY OR REPLACE {identifier(user_of(tenant) + '_' + name)} ON {table} "
                f"FOR SELECT USING tenant = {literal(tenant)} AS permissive TO {user}"
            )
    for table, name in zip(tables, TABLES):
        out.append(
            f"CREATE ROW POLICY OR REPLACE {identifier('jev_admin_' + name)} ON {table} "
            f"FOR SELECT USING 1 AS permissive TO {', '.join(identifier(a) for a in admins)}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", required=True, help='the JEV_QUERY_TOKENS file: {"<token>": "<tenant>"}')
    ap.add_argument("--database", default="default")
    ap.add_argument("--admin", action="append", default=[], help="a user that reads every tenant (default: default)")
    args = ap.parse_args(argv)
    with open(args.tokens, "rb") as f:
        tokens = json.load(f)
    for statement in statements(tokens, args.database, tuple(args.admin) or ("default",)):
        print(statement + ";")
    return 0


if __name__ == "__main__":
    sys.exit(main())
