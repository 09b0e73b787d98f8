"""The table registry against the engine the migrations build: every entry exists as declared, every table or view
with a tenant column is declared (a migration without its registry line fails here), and usage_events' columns
are the UsageEvent record's fields."""

from __future__ import annotations

import pytest

from infra.clickhouse import USAGE_COLUMNS, keep_request_texts
from schemas.records import UsageEvent
from schemas.tables import TABLES, TENANT_TABLES, TENANT_VIEWS, USAGE_TABLES


def catalog(client) -> dict[str, tuple[str, bool]]:
    """{name: (engine, has a tenant column)} of the current database."""
    rows = client.query(
        "SELECT name, engine, name IN (SELECT table FROM system.columns WHERE database = currentDatabase() "
        "AND name = 'tenant') FROM system.tables WHERE database = currentDatabase()"
    ).result_rows
    return {name: (engine, bool(tenant)) for name, engine, tenant in rows}


@pytest.fixture
def with_request_texts(clickhouse_session):
    """The opt-in table, as JEV_RAW_TEXT_DAYS=1 makes it, dropped after: the session's engine is shared and by
    default holds no raw text (tests/security/test_storage.py)."""
    keep_request_texts(clickhouse_session, 1)
    yield clickhouse_session
    clickhouse_session.command("DROP TABLE IF EXISTS request_texts")


def test_every_entry_exists_as_declared(with_request_texts, clickhouse_session):
    found = catalog(clickhouse_session)
    for table in TABLES:
        engine, has_tenant = found[table.name]
        assert (engine == "View") == table.view, table
        assert has_tenant == (table.tenant_column is not None), table


def test_every_table_or_view_with_a_tenant_column_is_declared(with_request_texts, clickhouse_session):
    declared = {t.name for t in TABLES}
    tenant_kept = {
        name
        for name, (engine, tenant) in catalog(clickhouse_session).items()
        if tenant and (engine == "View" or engine.endswith("MergeTree"))
    }
    assert tenant_kept <= declared, f"add these to schemas/tables.py: {sorted(tenant_kept - declared)}"


def test_the_lists_derive_from_the_registry():
    assert "usage_event_ids" in USAGE_TABLES and "usage_event_ids" not in TENANT_TABLES  # no tenant column
    assert "request_texts" in TENANT_TABLES and "request_texts" not in USAGE_TABLES  # opt-in
    assert "agreement_by_mechanism_day" in TENANT_VIEWS and not set(TENANT_VIEWS) & set(USAGE_TABLES)


def test_usage_columns_are_the_usage_event_fields_and_the_tables_columns(clickhouse_session):
    assert USAGE_COLUMNS == list(UsageEvent.__annotations__)
    stored = {
        r[0]
        for r in clickhouse_session.query(
            "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'usage_events' "
            "AND default_kind NOT IN ('MATERIALIZED', 'ALIAS')"
        ).result_rows
    }
    assert set(USAGE_COLUMNS) == stored
