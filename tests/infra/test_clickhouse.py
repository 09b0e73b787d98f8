"""Migrations on the real embedded ClickHouse: idempotent, OTel aliases, section derivation, TTL."""

import pytest

from infra import clickhouse
from workers.analytics.sample import request_events


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("SELECT 1;\nSELECT 2;", ["SELECT 1", "SELECT 2"]),
        (
            "-- a comment; with a semicolon\nCREATE TABLE t (s String DEFAULT ';')\nENGINE = Memory;\n",
            ["CREATE TABLE t (s String DEFAULT ';')\nENGINE = Memory"],
        ),
        ("SELECT splitByChar(';', 'a;b')", ["SELECT splitByChar(';', 'a;b')"]),
    ],
)
def test_statements_split_only_at_line_ends(sql, expected):
    assert clickhouse.statements(sql) == expected


def test_migrate_is_idempotent_and_creates_every_usage_table(usage_db):
    assert clickhouse.migrate(usage_db) == []
    tables = {r[0] for r in usage_db.query("SHOW TABLES").result_rows}
    assert set(clickhouse.USAGE_TABLES) <= tables
    applied = [r[0] for r in usage_db.query("SELECT name FROM schema_migrations FINAL ORDER BY name").result_rows]
    assert applied == [name for name, _ in clickhouse.migrations()]


@pytest.mark.parametrize(
    "tier, sections",
    [
        ("cache_l1", {"ingest": "", "cache": "cache_l1", "postprocess": ""}),
        ("llm", {"ingest": "", "score": "cascade,escalation,fine", "postprocess": ""}),
        ("rules", {"ingest": "", "score": "rules", "postprocess": ""}),
    ],
)
def test_section_is_the_frame_after_the_stage(usage_db, tier, sections):
    import random

    from streams.runtime.usage_sink import UsageSink

    UsageSink(usage_db).insert(request_events(1, 1.7e9, random.Random(1), tier=tier))
    got = dict(
        usage_db.query(
            "SELECT stage, arrayStringConcat(arraySort(groupArray(section)), ',') FROM usage_events GROUP BY stage"
        ).result_rows
    )
    assert got == sections


def test_otel_genai_aliases_read_the_base_columns(usage_db):
    import random

    from streams.runtime.usage_sink import UsageSink

    UsageSink(usage_db).insert(request_events(3, 1.7e9, random.Random(2), tier="fine"))
    row = usage_db.query(
        "SELECT sum(`gen_ai.usage.input_tokens`) = sum(input_tokens), "
        "sum(`gen_ai.usage.output_tokens`) = sum(output_tokens), "
        "sum(`gen_ai.usage.cache_read.input_tokens`) = sum(cache_read_tokens), "
        "any(`gen_ai.conversation.id`) = any(session_id), sum(input_tokens) > 0 "
        "FROM usage_events"
    ).result_rows[0]
    assert row == (1, 1, 1, 1, 1)


def test_ttl_is_set_and_removed(usage_db):
    def engine():
        return usage_db.query(
            "SELECT engine_full FROM system.tables WHERE name = 'usage_events' AND database = currentDatabase()"
        ).result_rows[0][0]

    clickhouse.set_ttl(usage_db, 30)
    assert "toIntervalDay(30)" in engine()
    clickhouse.set_ttl(usage_db, 0)
    assert " TTL " not in engine()
