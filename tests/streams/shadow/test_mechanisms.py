"""The mechanism mapping is one: mechanism_of in Python, MECHANISM_SQL in ClickHouse (agreement) and migration
005's view usage_savings_by_mechanism name the same mechanism for every usage row."""

from __future__ import annotations

import itertools
import time

from schemas.records import UsageEvent
from streams.runtime.usage_sink import UsageSink
from streams.shadow.mechanisms import DISTILL_LAYERS, MECHANISM_SQL, SCORE_SECTIONS, mechanism_of

STAGES = ("ingest", "distill", "cache", "score", "postprocess")
SECTIONS = (*DISTILL_LAYERS, *SCORE_SECTIONS, "cache_l1", "cache_l2", "cache_l3", "fallback", "cleanup", "call", "")
OUTCOMES = ("ok", "degraded")
GRID = list(itertools.product(STAGES, SECTIONS, OUTCOMES))


def test_python_and_sql_name_the_same_mechanism(clickhouse_session):
    rows = clickhouse_session.query(
        f"SELECT stage, section, outcome, {MECHANISM_SQL} FROM (SELECT tupleElement(t, 1) AS stage, "
        "tupleElement(t, 2) AS section, tupleElement(t, 3) AS outcome FROM "
        "(SELECT arrayJoin({grid:Array(Tuple(String, String, String))}) AS t))",
        parameters={"grid": GRID},
    ).result_rows
    assert len(rows) == len(GRID)
    assert {(s, sec, o): m for s, sec, o, m in rows} == {key: mechanism_of(*key) for key in GRID}


def test_migration_005s_view_names_the_same_mechanism(usage_db):
    now = time.time()
    events = [
        UsageEvent(
            event_id=f"t{n}/r{n}:{stage}:{section}",
            request_id=f"r{n}",
            ts=now,
            tenant=f"t{n}",
            service="s",
            business_line="b",
            session_id="x",
            user_id="u",
            decision_type="d",
            stage=stage,
            stack=f"request;{stage};{section}" if section else f"request;{stage}",
            outcome=outcome,
            nominal_tokens=10,
            input_tokens=1,
        )
        for n, (stage, section, outcome) in enumerate(GRID)
    ]
    UsageSink(usage_db).insert(events)
    view = dict(usage_db.query("SELECT tenant, mechanism FROM usage_savings_by_mechanism").result_rows)
    assert len(view) == len(GRID)
    assert {n: view[f"t{n}"] for n in range(len(GRID))} == {n: mechanism_of(*key) for n, key in enumerate(GRID)}
