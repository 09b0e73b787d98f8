"""Agreement beside savings on the real ClickHouse engine: tokens saved per mechanism from usage rows, the
verdicts' agreement per mechanism, shadow work kept out of serving spend, and the report in every format."""

import datetime as dt

from schemas.records import UsageEvent, Verdict
from streams.shadow.store import VerdictStore
from workers.analytics import levels, report
from workers.analytics.agreement import agreement, shadow_work
from workers.cli.commands.report import print_tables

from .conftest import NOW

SINCE = NOW - dt.timedelta(days=1)


def event(rid: str, stage: str, section: str = "", nominal: int = 0, actual: int = 0) -> UsageEvent:
    return UsageEvent(
        event_id=":".join(p for p in (rid, stage, section) if p),
        request_id=rid,
        ts=(NOW - dt.timedelta(hours=1)).timestamp(),
        tenant="acme",
        service="search",
        business_line="marketplace",
        session_id="s",
        user_id="u",
        decision_type="ranking",
        stage=stage,
        stack=";".join(p for p in ("acme", "search", "ranking", stage, section) if p),
        input_tokens=actual,
        nominal_tokens=nominal,
    )


def verdict(rid: str, agreed: bool, *mechanisms: str) -> Verdict:
    return Verdict(
        request_id=rid,
        ts=(NOW - dt.timedelta(hours=1)).timestamp(),
        tenant="acme",
        service="search",
        decision_type="ranking",
        kind="decide",
        mechanisms=list(mechanisms),
        agreed=agreed,
        kept=agreed,
    )


def fill(load, usage_db):
    load(
        [
            event("r1", "cache", "cache_l1", nominal=100),
            event("r2", "cache", "cache_l1", nominal=60),
            event("r3", "score", "cascade", nominal=80, actual=30),
            event("r3", "score", "fine", nominal=50, actual=50),
            event("r3", "distill", "time", nominal=40),
            event("r3", "shadow", "fine", actual=200),
            event("r4", "shadow", "dropped"),
        ]
    )
    assert (
        VerdictStore(usage_db).store(
            [
                verdict("r1", True, "cache.l1"),
                verdict("r2", False, "cache.l1"),
                verdict("r3", True, "cascade", "distill.time"),
                verdict("r3", True, "cascade", "distill.time"),
            ]
        )
        == 4
    )  # r3 redelivered


def test_agreement_by_mechanism_beside_tokens_saved(load, usage_db):
    fill(load, usage_db)
    a = agreement(usage_db, SINCE)
    assert a["overall"] == {
        "verdicts": 3,
        "agreed": 2,
        "agreement": 0.6667,
        "kept": 2,
        "kept_share": 0.6667,
        "labelled": 0,
    }
    m = a["by_mechanism"]
    assert set(m) == {"cache.l1", "cascade", "distill.time"}  # fine saved nothing, shadow is no saving
    assert (m["cache.l1"]["tokens_saved"], m["cache.l1"]["verdicts"], m["cache.l1"]["agreement"]) == (160, 2, 0.5)
    assert (m["cascade"]["tokens_saved"], m["cascade"]["agreement"], m["cascade"]["floor"]) == (50, 1.0, 0.9)
    assert m["distill.time"]["tokens_saved"] == 40 and m["distill.time"]["lower"] < 1.0
    assert shadow_work(usage_db, SINCE) == {"tokens": 200, "dropped": 1, "skipped": 0}
    view = dict(
        usage_db.query("SELECT mechanism, sum(verdicts) FROM agreement_by_mechanism_day GROUP BY mechanism").result_rows
    )
    assert view == {"all": 3, "cache.l1": 2, "cascade": 1, "distill.time": 1}


def test_shadow_work_is_not_serving_spend(load, usage_db):
    fill(load, usage_db)
    assert levels.totals(usage_db, SINCE)["tokens"] == 80  # 30 cascade + 50 fine; the 200 shadow tokens apart
    per_request = usage_db.query("SELECT sum(input_tokens) FROM usage_by_request").result_rows[0][0]
    assert per_request == 80


def test_report_shows_agreement_in_every_format(load, usage_db, capsys):
    fill(load, usage_db)
    data = report.collect(usage_db, SINCE, NOW)
    rows = {r["mechanism"]: r for r in report.agreement_rows(data)}
    assert rows["cache.l1"]["tokens_saved"] == 160 and rows["all"]["verdicts"] == 3
    html = report.render_html(data)
    assert "the agreement each mechanism kept" in html and "cache.l1" in html
    print_tables(data)
    out = capsys.readouterr().out
    assert "agreement each mechanism kept" in out and "distill.time" in out
