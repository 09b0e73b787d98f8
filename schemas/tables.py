"""The ClickHouse table registry: every table and view Jev keeps (their DDL is in infra/clickhouse/migrations),
declared once, with who may read it. The lists others need derive from it: the tables a fresh demo empties
(infra.clickhouse.USAGE_TABLES), the row policies on a server (infra.clickhouse.access) and what an analytics
sandbox copies (workers.analytics.sandbox). Adding a view to analytics is its migration and one line here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Table:
    name: str
    tenant_column: str | None = "tenant"  # None: no tenant column (a table without one no tenant reads)
    tenants_read: bool = True  # a tenant may read its own rows (sandbox copy, server row policy)
    view: bool = False  # a plain VIEW over the tables: no rows of its own, re-created wherever they are copied,
    # so in a sandbox it reads the caller's rows alone, with a tenant column or without
    opt_in: bool = False  # made only when a setting asks for it (request_texts: JEV_RAW_TEXT_DAYS)

    @property
    def tenant_readable(self) -> bool:
        return self.tenants_read and (self.view or self.tenant_column is not None)


TABLES = (
    Table("usage_events"),
    Table("usage_by_request"),
    Table("usage_by_session_hour"),
    Table("usage_by_stack_hour"),
    Table("usage_by_business_day"),
    Table("usage_event_ids", tenant_column=None),
    Table("request_texts", opt_in=True),
    Table("shadow_verdicts"),
    Table("indices_by_minute"),
    Table("usage_savings_by_mechanism", view=True),
    Table("agreement_by_mechanism_day", view=True),
    Table("efficiency_indices", tenant_column=None, view=True),
)

# tables with rows a tenant reads its own of: what a sandbox copies and a server's row policies cover
TENANT_TABLES = tuple(t.name for t in TABLES if t.tenant_readable and not t.view)
# views over those tables alone: a sandbox re-creates them over the rows it holds
TENANT_VIEWS = tuple(t.name for t in TABLES if t.tenant_readable and t.view)
# the tables the pipeline always writes (a fresh demo empties them)
USAGE_TABLES = tuple(t.name for t in TABLES if not t.view and not t.opt_in)
