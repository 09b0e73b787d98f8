"""The usage report: the four levels plus the charts' series, and its self-contained HTML (inline SVG, no CDN)."""

from __future__ import annotations

import datetime as dt
from html import escape

from workers.analytics import levels, numbers
from workers.analytics.agreement import agreement

CHART_W, CHART_H, PAD = 760, 240, 48
COLORS = ["#3b7dd8", "#e8743b", "#19a979", "#ed4a7b", "#945ecf", "#13a4b4", "#f2a541", "#7f7f7f"]
BUCKET_WORDS = {
    60: "minute",
    300: "5 minutes",
    900: "15 minutes",
    3600: "hour",
    21600: "6 hours",
    86400: "day",
    604800: "week",
}


def collect(client, since: dt.datetime, now: dt.datetime, by: str = "service") -> dict:
    """Everything `jev report` shows; keys request, session, service, business are the four levels."""
    totals = levels.totals(client, since)
    return {
        "since": since.isoformat(),
        "now": now.isoformat(),
        "totals": totals,
        **({"empty": levels.empty_reason(client, since)} if not totals["events"] else {}),
        **levels.four_levels(client, since, now),
        "by": by,
        "breakdown": levels.breakdown(client, by, since),
        "tokens_over_time": levels.tokens_over_time(client, since, now),
        "savings_by_mechanism": levels.savings_by_mechanism(client, since),
        "tier_shares": levels.tier_shares(client, since),
        "efficiency": levels.efficiency(client, since),
        "by_model": levels.by_model(client, since),
        "agreement": agreement(client, since),
        "indices": levels.indices(client, since),
    }


AGREEMENT_COLUMNS = ["mechanism", "tokens_saved", "verdicts", "agreement", "lower", "floor"]


def agreement_rows(data: dict) -> list[dict]:
    """Each mechanism's tokens saved beside the agreement it kept ('all': every shadow verdict)."""
    a = data["agreement"]
    overall = {
        "mechanism": "all",
        "tokens_saved": sum(m["tokens_saved"] for m in a["by_mechanism"].values()),
        "verdicts": a["overall"]["verdicts"],
        "agreement": a["overall"]["agreement"],
        "lower": None,
        "floor": None,
    }
    return [
        *({"mechanism": k, **{c: m[c] for c in AGREEMENT_COLUMNS[1:]}} for k, m in a["by_mechanism"].items()),
        overall,
    ]


def _time_label(iso: str, bucket_s: int, first: bool) -> str:
    t = dt.datetime.fromisoformat(iso)
    if bucket_s < 3600:
        return t.strftime("%Y-%m-%d %H:%M" if first else "%H:%M")
    return t.strftime("%Y-%m-%d %H:%M" if bucket_s < 86400 else "%Y-%m-%d")


def _line_chart(
    points: list[tuple[str, float]],
    series_b: list[float] | None = None,
    bucket_s: int = 3600,
    names: tuple[str, str] = ("actual", "nominal"),
) -> str:
    """Two series over time, each drawn as a line with a marker per bucket (a one-bucket window shows both
    markers), x labels at both ends and the middle, the y scale at the top."""
    if not points:
        return "<p>no data in the window</p>"
    series = [[v for _, v in points]] + ([series_b] if series_b else [])
    top = max(max(s) for s in series) or 1
    step = (CHART_W - 2 * PAD) / max(1, len(points) - 1)
    x0 = CHART_W / 2 if len(points) == 1 else PAD

    def xy(values):
        return [(x0 + i * step, CHART_H - PAD - v / top * (CHART_H - 2 * PAD)) for i, v in enumerate(values)]

    parts = []
    for k, values in enumerate(series):
        coords = xy(values)
        dash = ' stroke-dasharray="5 3"' if k else ""
        if len(coords) > 1:
            parts.append(
                f'<polyline class="series" data-series="{names[k]}" fill="none" stroke="{COLORS[k]}" '
                f'stroke-width="2"{dash} points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in coords)}"/>'
            )
        parts += [
            f'<circle class="point" data-series="{names[k]}" cx="{x:.1f}" cy="{y:.1f}" r="{4 - k}" '
            f'fill="{COLORS[k]}"><title>{escape(label)}: {numbers.tokens(v)} {names[k]} tokens</title></circle>'
            for (label, _), (x, y), v in zip(points, coords, values)
        ]
    ends = [0, len(points) // 2, len(points) - 1] if len(points) > 2 else list(range(len(points)))
    anchors = {0: "start", len(points) - 1: "end"}
    labels = [
        f'<text class="xlabel" x="{xy([0] * len(points))[i][0]:.1f}" y="{CHART_H - PAD + 16}" '
        f'text-anchor="{anchors.get(i, "middle") if len(points) > 1 else "middle"}">'
        f"{escape(_time_label(points[i][0], bucket_s, i == 0))}</text>"
        for i in ends
    ]
    labels.append(f'<text x="{PAD - 4}" y="{PAD - 6}" text-anchor="start">{numbers.tokens(top)} tokens</text>')
    legend = "".join(
        f'<rect x="{CHART_W - PAD - 200 + k * 100}" y="8" width="14" height="3" fill="{COLORS[k]}"/>'
        f'<text x="{CHART_W - PAD - 182 + k * 100}" y="13">{escape(names[k])}</text>'
        for k in range(len(series))
    )
    return (
        f'<svg class="timechart" width="{CHART_W}" height="{CHART_H}" font-size="11">'
        f'<line x1="{PAD}" y1="{CHART_H - PAD}" x2="{CHART_W - PAD}" y2="{CHART_H - PAD}" stroke="#999"/>'
        + "".join(parts + labels)
        + legend
        + "</svg>"
    )


def _bars(items: list[tuple[str, list[float]]], legend: list[str], fmt=numbers.tokens) -> str:
    """Horizontal grouped bars: one row per label, one bar per value, each labelled by `fmt`."""
    if not items:
        return "<p>no data in the window</p>"
    top = max(max(vs) for _, vs in items) or 1
    row_h, label_w = 14 * len(legend) + 8, 220
    height = row_h * len(items) + 24
    parts = []
    for i, (label, values) in enumerate(items):
        y = i * row_h
        parts.append(f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{escape(label)}</text>')
        for j, v in enumerate(values):
            w = max(0.0, v) / top * (CHART_W - label_w - 90)
            parts.append(
                f'<rect x="{label_w}" y="{y + j * 14}" width="{w:.1f}" height="12" fill="{COLORS[j]}">'
                f"<title>{escape(label)} {escape(legend[j])}: {fmt(v)}</title></rect>"
                f'<text class="barlabel" x="{label_w + w + 4:.1f}" y="{y + j * 14 + 10}">{fmt(v)}</text>'
            )
    keys = "".join(
        f'<rect x="{label_w + k * 140}" y="{height - 14}" width="10" height="10" fill="{COLORS[k]}"/>'
        f'<text x="{label_w + k * 140 + 14}" y="{height - 5}">{escape(name)}</text>'
        for k, name in enumerate(legend)
    )
    return f'<svg width="{CHART_W}" height="{height}" font-size="11">{"".join(parts)}{keys}</svg>'


def _table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(numbers.cell(c, r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _indices(indices: dict) -> str:
    rows = []
    for key, i in indices.items():
        low, high = i["healthy"]
        fmt = (lambda v: f"{v:.2f}") if key == "pe" else numbers.percent
        healthy = (
            f"{fmt(low)} – {fmt(high)}"
            if low is not None and high is not None
            else f"≥ {fmt(low)}"
            if low is not None
            else f"< {fmt(high)}"
        )
        rows.append(
            {
                "index": INDEX_NAMES.get(key, key),
                "value": "–" if i["value"] is None else fmt(i["value"]),
                "healthy": healthy,
                "status": i["status"],
            }
        )
    return _table(rows, ["index", "value", "healthy", "status"])


INDEX_NAMES = {
    "te": "TE token efficiency",
    "cp": "CP cache penetration",
    "hr": "HR hybrid routing",
    "pe": "PE protocol expansion",
    "mu": "MU GPU memory",
}


def render_html(data: dict) -> str:
    t, eff = data["totals"], data["efficiency"]
    saved = 1 - t["tokens"] / t["nominal_tokens"] if t["nominal_tokens"] else 0.0
    overtime = data["tokens_over_time"]
    bucket = overtime["bucket_s"]
    points = [(p["t"], p["tokens"]) for p in overtime["points"]]
    savings = [
        (f"{s['stage']};{s['section']}".rstrip(";"), [float(s["nominal_tokens"]), float(s["tokens"])])
        for s in data["savings_by_mechanism"]
    ]
    mechanisms = [
        {
            "mechanism": f"{s['stage']};{s['section']}".rstrip(";"),
            "nominal_tokens": s["nominal_tokens"],
            "tokens": s["tokens"],
            "saved_tokens": s["saved_tokens"],
            "why": s.get("note", ""),
        }
        for s in data["savings_by_mechanism"]
    ]
    tiers = [(k, [v]) for k, v in data["tier_shares"].items()]
    sections = [
        (
            "Totals",
            _table(
                [
                    {
                        "tokens": t["tokens"],
                        "nominal": t["nominal_tokens"],
                        "saved": f"{saved:.1%}",
                        "cost": t["cost"],
                        "requests": t["requests"],
                        "L3 pre-answers": t["pre_answers"],
                        "pre-answer tokens": t["pre_answer_tokens"],
                        "events": t["events"],
                    }
                ],
                ["tokens", "nominal", "saved", "cost", "requests", "L3 pre-answers", "pre-answer tokens", "events"],
            ),
        ),
        ("Efficiency indices (seed 004)", _indices(data["indices"])),
        ("Efficiency", _table([eff], list(eff))),
        (
            f"Tokens over time (per {BUCKET_WORDS.get(bucket, f'{bucket} s')}; dashed: nominal)",
            _line_chart(points, [float(p["nominal_tokens"]) for p in overtime["points"]], bucket),
        ),
        (
            "Savings by mechanism (nominal vs actual, per stage;section)",
            _bars(savings, ["nominal", "actual"])
            + _table(mechanisms, ["mechanism", "nominal_tokens", "tokens", "saved_tokens", "why"]),
        ),
        (
            "Tokens saved and the agreement each mechanism kept (shadow verdicts against the naive path)",
            _table(
                [{k: "-" if v is None else v for k, v in r.items()} for r in agreement_rows(data)], AGREEMENT_COLUMNS
            ),
        ),
        ("Tier shares (of decisions; L3 pre-answers are not decisions)", _bars(tiers, ["share"], numbers.percent)),
        (
            f"Tokens by {data['by']}",
            _table(data["breakdown"], ["key", "tokens", "nominal_tokens", "saved_tokens", "cost"]),
        ),
        (
            "Service level: tokens per request",
            _table(
                data["service"]["overall"],
                ["service", "decision_type", "requests", "p50", "p95", "p99", "tokens", "cost"],
            ),
        ),
        (
            "Top sessions (rolling 24 h)",
            _table(data["session"]["top"], ["tenant", "session_id", "user_id", "requests", "tokens", "cost"]),
        ),
        (
            "Top requests",
            _table(data["request"]["top"], ["request_id", "service", "decision_type", "tier", "tokens", "cost"]),
        ),
        (
            "Weekly leaderboard: tokens per business event (fewest first)",
            _table(
                data["business"]["weekly_leaderboard"],
                [
                    "week",
                    "business_line",
                    "business_event",
                    "events",
                    "tokens_per_event",
                    "cost_per_event",
                    "events_per_1k_tokens",
                ],
            ),
        ),
    ]
    if data.get("switches") is not None:
        sections.insert(
            2,
            (
                "Kill switches now",
                _table(
                    [{"switch": k, "state": "on" if v else "OFF"} for k, v in data["switches"].items()],
                    ["switch", "state"],
                ),
            ),
        )
    body = "".join(f"<h2>{escape(title)}</h2>{html}" for title, html in sections)
    empty = f'<p class="empty"><b>No usage in this window:</b> {escape(data["empty"])}</p>' if data.get("empty") else ""
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Jev usage report</title><style>"
        "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
        "td:last-child{text-align:left;max-width:520px}.empty{background:#fff4d6;padding:8px}"
        "</style></head><body>"
        f"<h1>Jev usage report</h1><p>{escape(data['since'])} → {escape(data['now'])}</p>{empty}{body}"
        "</body></html>"
    )
