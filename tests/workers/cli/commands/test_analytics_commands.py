"""`jev report`, `jev sql`, `jev flamegraph`, `jev alerts` through the CLI on the shared embedded ClickHouse."""

import asyncio
import time
import xml.etree.ElementTree as ET

import orjson
import pytest

from streams.runtime.usage_sink import UsageSink
from workers.analytics.sample import usage_events
from workers.cli.main import main


@pytest.fixture
def filled(usage_db, clickhouse_dsn, monkeypatch):
    monkeypatch.setenv("JEV_CLICKHOUSE_DSN", clickhouse_dsn)
    UsageSink(usage_db).insert(usage_events(300, time.time() - 3 * 3600, span_s=3 * 3600))
    return usage_db


def json_lines(capsys):
    return [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_report_json_total_equals_sql_sum(filled, capsys):
    assert main(["report", "--json", "--by", "decision_type"]) == 0
    *rows, report = json_lines(capsys)
    assert {"request", "session", "service", "business"} <= set(report)
    assert {r["by"] for r in rows} == {"decision_type"} and len(rows) == 4
    assert main(["sql", "SELECT sum(input_tokens + output_tokens) AS tokens FROM usage_events", "--json"]) == 0
    row, summary = json_lines(capsys)
    assert report["totals"]["tokens"] == row["tokens"] == report["request"]["tokens"] > 0
    assert summary["rows"] == 1 and summary["via"] == "embedded"


def test_report_html_has_the_plots(filled, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "--html", str(out), "--since", "24h"]) == 0
    html = out.read_text()
    for heading in (
        "Tokens over time",
        "Savings by mechanism",
        "Tier shares",
        "Top sessions",
        "Weekly leaderboard",
        "Efficiency indices",
    ):
        assert heading in html
    assert html.count("<svg") >= 3 and "http" not in html.split("<body>")[1]


def test_report_rejects_a_bad_window(filled, capsys):
    assert main(["report", "--since", "yesterday"]) == 2
    assert "expected a number and a unit" in capsys.readouterr().err


def test_flamegraph_writes_svg_with_token_counts(filled, tmp_path, capsys):
    out = tmp_path / "f.svg"
    assert main(["flamegraph", "--since", "24h", "-o", str(out)]) == 0
    titles = [t.text for t in ET.parse(out).iter("{http://www.w3.org/2000/svg}title")]
    total = filled.query("SELECT sum(input_tokens + output_tokens) FROM usage_events").result_rows[0][0]
    assert f"all: {total:,} tokens (100.0%)" in titles
    assert any(t.startswith("score: ") for t in titles)


def test_sql_refuses_writes(filled, capsys):
    assert main(["sql", "DROP TABLE usage_events"]) == 2
    assert filled.query("EXISTS TABLE usage_events").result_rows[0][0] == 1


def test_alerts_json_and_thresholds(filled, capsys):
    assert main(["alerts", "--json", "--set", "session_tokens_24h=1", "--budget", "ranking=1"]) == 1
    *alerts, summary = json_lines(capsys)
    assert summary["alerts"] == len(alerts) and {"session_tokens_24h", "daily_budget"} <= set(summary["rules"])
    assert main(["alerts", "--set", "no_such=1"]) == 2


def test_owner_serves_queries_with_its_token(filled, clickhouse_dsn):
    from workers.analytics.owner import QueryServer, ask_owner, owner_file

    async def scenario():
        async with QueryServer(clickhouse_dsn):
            owner = orjson.loads(owner_file(clickhouse_dsn).read_bytes())
            answer = await asyncio.to_thread(
                ask_owner, clickhouse_dsn, "query", {"sql": "SELECT count() AS n FROM usage_events"}
            )
            return owner, answer

    owner, answer = asyncio.run(scenario())
    assert answer["columns"] == ["n"] and answer["rows"][0][0] > 0 and len(owner["token"]) > 20
    assert not owner_file(clickhouse_dsn).exists()


def test_owner_refuses_a_wrong_token(filled, clickhouse_dsn):
    import urllib.error
    import urllib.request

    from workers.analytics.owner import QueryServer, owner_file

    async def scenario():
        async with QueryServer(clickhouse_dsn):
            url = orjson.loads(owner_file(clickhouse_dsn).read_bytes())["url"]
            req = urllib.request.Request(
                url, data=b'{"sql": "SELECT 1"}', method="POST", headers={"Authorization": "Bearer wrong"}
            )
            with pytest.raises(urllib.error.HTTPError) as err:
                await asyncio.to_thread(urllib.request.urlopen, req, None, 5)
            return err.value.code

    assert asyncio.run(scenario()) == 401
