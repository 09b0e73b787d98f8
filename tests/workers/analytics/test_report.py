"""The analyst's view: numbers for people, a time chart bucketed from the window with both series drawn, negative
savings explained in place, L3 pre-answers apart from requests, an empty window that says why; and the HTML report
and the flame graph as headless Chromium renders them (skipped where Chromium is not installed)."""

import datetime as dt
import json
import re
import shutil
import subprocess
import time

import pytest

from schemas.records import UsageEvent
from streams.runtime.usage_sink import UsageSink
from workers.analytics import flamegraph, levels, numbers, report
from workers.analytics.sample import usage_events

UTC = dt.UTC
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.parametrize(
    "value, shown", [(0, "$0"), (2e-06, "$0.00000200"), (0.0123, "$0.0123"), (0.5, "$0.500"), (1234.5, "$1,234.50")]
)
def test_costs_in_dollars_with_enough_digits(value, shown):
    assert numbers.dollars(value) == shown


def test_cells_by_column():
    assert numbers.cell("tokens", 49583) == "49,583"
    assert numbers.cell("cost_per_event", 3e-05) == "$0.0000300"
    assert numbers.cell("token_efficiency", 1) == "100.0%"
    assert numbers.cell("p95", 161.25) == "161.2"
    assert numbers.cell("note", None) == "–"


@pytest.mark.parametrize(
    "span_s, bucket",
    [(20 * 60, 60), (2 * 3600, 60), (5 * 3600, 300), (24 * 3600, 900), (7 * 86400, 6 * 3600), (90 * 86400, 86400)],
)
def test_bucket_follows_the_window(span_s, bucket):
    assert levels.bucket_for(span_s) == bucket


def pre_answer(of: str, ts: float) -> list[UsageEvent]:
    rid = f"{of}~l3~0"
    base = dict(
        request_id=rid,
        ts=ts,
        tenant="t0",
        service="search",
        business_line="marketplace",
        session_id="s-1",
        user_id="u-1",
        decision_type="ranking",
    )
    return [
        UsageEvent(
            event_id=f"{rid}:score:fine",
            stage="score",
            stack="t0;search;ranking;score;fine",
            input_tokens=40,
            nominal_tokens=40,
            **base,
        ),
        UsageEvent(
            event_id=f"{rid}:postprocess",
            stage="postprocess",
            stack="t0;search;ranking;postprocess",
            outcome="fine",
            **base,
        ),
    ]


@pytest.fixture
def short_demo(usage_db):
    """120 requests over the last 20 minutes, with two L3 pre-answers."""
    start = time.time() - 20 * 60
    events = usage_events(120, start, span_s=19 * 60)
    events += pre_answer("r-3", start + 60) + pre_answer("r-9", start + 120)
    UsageSink(usage_db).insert(events)
    now = dt.datetime.now(UTC)
    return report.collect(usage_db, now - dt.timedelta(hours=1), now)


def test_short_window_is_drawn_by_the_minute_with_both_series(short_demo):
    overtime = short_demo["tokens_over_time"]
    assert overtime["bucket_s"] == 60
    assert 15 <= len(overtime["points"]) <= 21
    html = report.render_html(short_demo)
    assert html.count('<polyline class="series"') == 2
    assert "per minute" in html


def test_pre_answers_are_not_requests_nor_decisions(short_demo):
    t = short_demo["totals"]
    assert (t["requests"], t["pre_answers"], t["pre_answer_tokens"]) == (120, 2, 80)
    assert short_demo["request"]["requests"] == 120
    assert short_demo["indices"]["cp"]["value"] is not None


def test_negative_savings_are_explained_where_they_are_shown(short_demo):
    negative = [s for s in short_demo["savings_by_mechanism"] if s["saved_tokens"] < 0]
    assert negative and all(s["note"] for s in negative)
    assert not any(s["tokens"] == 0 and s["nominal_tokens"] == 0 for s in short_demo["savings_by_mechanism"])
    html = report.render_html(short_demo)
    for s in negative:
        assert re.search(re.escape(f"{s['stage']};{s['section']}") + r"</td>.*?" + re.escape(s["note"][:30]), html)


def test_numbers_read_like_numbers(short_demo):
    html = report.render_html(short_demo)
    assert not re.search(r"\d\.\d+e[+-]\d", html), "scientific notation in the report"
    assert "$" in html and "%" in html


def test_an_empty_window_says_why(usage_db):
    now = dt.datetime.now(UTC)
    data = report.collect(usage_db, now - dt.timedelta(hours=1), now)
    assert "usage table is empty" in data["empty"]
    old = usage_events(5, time.time() - 3 * 86400, span_s=60)
    UsageSink(usage_db).insert(old)
    data = report.collect(usage_db, now - dt.timedelta(hours=1), now)
    assert f"newest of {len(old)} usage rows" in data["empty"]
    assert "No usage in this window" in report.render_html(data)


def chromium_dom(tmp_path, html: str, script: str) -> str:
    """The DOM Chromium holds after loading `html` with `script` run at the end of the page."""
    page = tmp_path / "page.html"
    page.write_text(
        html.replace("</body>", f"<script>{script}</script></body>")
        if "</body>" in html
        else f"<!doctype html><html><body>{html}<script>{script}</script></body></html>"
    )
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=3000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def checks_of(dom: str) -> dict:
    found = re.search(r'<pre id="checks">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_html_report_in_chromium(short_demo, tmp_path):
    script = """
    var lines = Array.from(document.querySelectorAll('svg.timechart .series')).map(function (l) {
      var b = l.getBBox(); return {series: l.dataset.series, width: b.width, height: b.height}; });
    var labels = Array.from(document.querySelectorAll('svg.timechart .xlabel'))
      .map(function (t) { return t.textContent; });
    var bars = Array.from(document.querySelectorAll('.barlabel')).map(function (t) { return t.textContent; });
    var pre = document.createElement('pre'); pre.id = 'checks';
    pre.textContent = JSON.stringify({lines: lines, labels: labels, bars: bars, text: document.body.innerText});
    document.body.appendChild(pre);"""
    checks = checks_of(chromium_dom(tmp_path, report.render_html(short_demo), script))
    assert [line["series"] for line in checks["lines"]] == ["actual", "nominal"]
    assert all(line["width"] > 500 for line in checks["lines"])  # drawn across the chart, not a dot
    assert len(set(checks["labels"])) == len(checks["labels"]) >= 3  # distinct minute labels
    assert all(re.fullmatch(r"(\d{4}-\d\d-\d\d )?\d\d:\d\d", label) for label in checks["labels"])
    assert checks["bars"] and not any("e+" in b or "e-" in b for b in checks["bars"])
    assert "L3 pre-answers" in checks["text"]
    notes = [s["note"] for s in short_demo["savings_by_mechanism"] if s["saved_tokens"] < 0]
    assert notes and all(note[:60] in checks["text"] for note in notes)


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_flame_graph_in_chromium_zooms_on_click(tmp_path):
    stacks = {
        "acme;search;ranking;score;fine": 700.0,
        "acme;search;ranking;ingest": 100.0,
        "acme;payments;risk;score;rules": 200.0,
    }
    svg = flamegraph.render_svg(stacks, "test", "nominal", note="no model tokens were spent: nominal shown")
    inline = svg.split("?>", 1)[1]
    script = """
    var frames = Array.from(document.querySelectorAll('g.f'));
    var target = frames.find(function (g) { return g.dataset.p === 'all;acme;search'; });
    var before = +target.querySelector('rect').getAttribute('width');
    target.dispatchEvent(new MouseEvent('click', {bubbles: true}));
    var after = +target.querySelector('rect').getAttribute('width');
    var hidden = frames.filter(function (g) { return g.style.display === 'none'; })
      .map(function (g) { return g.dataset.p; });
    var pre = document.createElement('pre'); pre.id = 'checks';
    pre.textContent = JSON.stringify({frames: frames.length, before: before, after: after, hidden: hidden,
                                      text: document.body.innerText});
    document.body.appendChild(pre);"""
    checks = checks_of(chromium_dom(tmp_path, inline, script))
    prefixes = {";".join(stack.split(";")[:n]) for stack in stacks for n in range(1, len(stack.split(";")) + 1)}
    assert checks["frames"] == 1 + len(prefixes)  # "all" and every frame, none too narrow to draw
    assert checks["before"] == pytest.approx(1200 * 0.8, abs=1) and checks["after"] == pytest.approx(1200, abs=1)
    assert "all;acme;payments" in checks["hidden"]
    assert "nominal shown" in checks["text"]


def test_flame_graph_of_the_base_install_shows_nominal_tokens(usage_db, tmp_path, capsys, monkeypatch):
    """Lexical tiers, rules and caches spend no model tokens: the default weight falls back to nominal."""
    from workers.cli.commands import flamegraph as command

    events = [e for e in usage_events(30, time.time() - 600, span_s=300)]
    for e in events:
        e.input_tokens = e.output_tokens = e.cache_read_tokens = 0
    UsageSink(usage_db).insert(events)
    monkeypatch.setattr(
        "workers.analytics.owner.answer",
        lambda settings, endpoint, body: (
            {
                "stacks": flamegraph.folded(
                    usage_db, dt.datetime.now(UTC) - dt.timedelta(hours=1), weight=body["weight"]
                )
            },
            "test",
        ),
    )
    out = tmp_path / "f.svg"

    class Args:
        tenant = service = ""
        since, weight, output = "1h", "auto", str(out)

    assert command.run(Args, None) == 0
    svg = out.read_text()
    assert "no model tokens were spent" in svg and svg.count('class="f"') > 5
