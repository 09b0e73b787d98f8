"""The usage report: the four levels plus the charts' series, and its self-contained HTML (inline SVG, no CDN)."""
from __future__ import annotations

import datetime as dt
from html import escape

from workers.analytics import levels
from workers.analytics.agreement import agreement

CHART_W, CHART_H, PAD = 760, 220, 40
COLORS = ["#3b7dd8", "#e8743b", "#19a979", "#ed4a7b", "#945ecf", "#13a4b4", "#f2a541", "#7f7f7f"]


def collect(client, since: dt.datetime, now: dt.datetime, by: str = "service") -> dict:
    """Everything `jev report` shows; keys request, session, service, business are the four levels."""
    return {"since": since.isoformat(), "now": now.isoformat(), "totals": levels.totals(client, since),
            **levels.four_levels(client, since, now), "by": by, "breakdown": levels.breakdown(client, by, since),
            "tokens_over_time": levels.tokens_over_time(client, since),
            "savings_by_mechanism": levels.savings_by_mechanism(client, since),
            "tier_shares": levels.tier_shares(client, since), "efficiency": levels.efficiency(client, since),
            "agreement": agreement(client, since)}


AGREEMENT_COLUMNS = ["mechanism", "tokens_saved", "verdicts", "agreement", "lower", "floor"]


def agreement_rows(data: dict) -> list[dict]:
    """Each mechanism's tokens saved beside the agreement it kept ('all': every shadow verdict)."""
    a = data["agreement"]
    overall = {"mechanism": "all", "tokens_saved": sum(m["tokens_saved"] for m in a["by_mechanism"].values()),
               "verdicts": a["overall"]["verdicts"], "agreement": a["overall"]["agreement"], "lower": None,
               "floor": None}
    return [*({"mechanism": k, **{c: m[c] for c in AGREEMENT_COLUMNS[1:]}} for k, m in a["by_mechanism"].items()),
            overall]


def _line_chart(points: list[tuple[str, float]], series_b: list[float] | None = None) -> str:
    if not points:
        return "<p>no data in the window</p>"
    top = max([v for _, v in points] + (series_b or [])) or 1
    step = (CHART_W - 2 * PAD) / max(1, len(points) - 1)

    def path(values):
        return " ".join(f"{PAD + i * step:.1f},{CHART_H - PAD - v / top * (CHART_H - 2 * PAD):.1f}"
                        for i, v in enumerate(values))

    lines = [f'<polyline fill="none" stroke="{COLORS[0]}" stroke-width="2" points="{path([v for _, v in points])}"/>']
    lines += [f'<circle cx="{xy.split(",")[0]}" cy="{xy.split(",")[1]}" r="3" fill="{COLORS[0]}">'
              f'<title>{escape(label)}: {v:,.0f} tokens</title></circle>'
              for (label, v), xy in zip(points, path([v for _, v in points]).split())]
    if series_b:
        lines.append(f'<polyline fill="none" stroke="{COLORS[1]}" stroke-dasharray="4 3" points="{path(series_b)}"/>')
    labels = [f'<text x="{PAD}" y="{CHART_H - 8}">{escape(points[0][0][:13])}</text>',
              f'<text x="{CHART_W - PAD}" y="{CHART_H - 8}" text-anchor="end">{escape(points[-1][0][:13])}</text>',
              f'<text x="4" y="{PAD - 8}">{top:,.0f}</text>']
    return (f'<svg width="{CHART_W}" height="{CHART_H}" font-size="11">'
            f'<line x1="{PAD}" y1="{CHART_H - PAD}" x2="{CHART_W - PAD}" y2="{CHART_H - PAD}" stroke="#999"/>'
            + "".join(lines + labels) + "</svg>")


def _bars(items: list[tuple[str, list[float]]], legend: list[str]) -> str:
    """Horizontal grouped bars: one row per label, one bar per value."""
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
            w = v / top * (CHART_W - label_w - 90)
            parts.append(f'<rect x="{label_w}" y="{y + j * 14}" width="{w:.1f}" height="12" fill="{COLORS[j]}">'
                         f'<title>{escape(label)} {escape(legend[j])}: {v:,.4g}</title></rect>'
                         f'<text x="{label_w + w + 4:.1f}" y="{y + j * 14 + 10}">{v:,.4g}</text>')
    keys = "".join(f'<rect x="{label_w + k * 140}" y="{height - 14}" width="10" height="10" fill="{COLORS[k]}"/>'
                   f'<text x="{label_w + k * 140 + 14}" y="{height - 5}">{escape(name)}</text>'
                   for k, name in enumerate(legend))
    return f'<svg width="{CHART_W}" height="{height}" font-size="11">{"".join(parts)}{keys}</svg>'


def _table(rows: list[dict], columns: list[str]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v) -> str:
    return f"{v:,.4g}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def render_html(data: dict) -> str:
    t, eff = data["totals"], data["efficiency"]
    saved = 1 - t["tokens"] / t["nominal_tokens"] if t["nominal_tokens"] else 0.0
    overtime = [(p["hour"], p["tokens"]) for p in data["tokens_over_time"]]
    savings = [(f"{s['stage']};{s['section']}".rstrip(";"), [float(s["nominal_tokens"]), float(s["tokens"])])
               for s in data["savings_by_mechanism"]]
    tiers = [(k, [v * 100]) for k, v in data["tier_shares"].items()]
    sections = [
        ("Totals", _table([{"tokens": t["tokens"], "nominal": t["nominal_tokens"], "saved": f"{saved:.1%}",
                            "cost $": t["cost"], "requests": t["requests"], "events": t["events"]}],
                          ["tokens", "nominal", "saved", "cost $", "requests", "events"])),
        ("Efficiency indices", _table([eff], list(eff))),
        ("Tokens over time (per hour; dashed: nominal)",
         _line_chart(overtime, [float(p["nominal_tokens"]) for p in data["tokens_over_time"]])),
        ("Savings by mechanism (nominal vs actual, per stage;section)", _bars(savings, ["nominal", "actual"])),
        ("Tokens saved and the agreement each mechanism kept (shadow verdicts against the naive path)",
         _table([{k: "-" if v is None else v for k, v in r.items()} for r in agreement_rows(data)],
                AGREEMENT_COLUMNS)),
        ("Tier shares (% of decisions)", _bars(tiers, ["share %"])),
        (f"Tokens by {data['by']}",
         _table(data["breakdown"], ["key", "tokens", "nominal_tokens", "saved_tokens", "cost"])),
        ("Service level: tokens per request",
         _table(data["service"]["overall"], ["service", "decision_type", "requests", "p50", "p95", "p99", "tokens",
                                             "cost"])),
        ("Top sessions (rolling 24 h)", _table(data["session"]["top"],
                                               ["tenant", "session_id", "user_id", "requests", "tokens", "cost"])),
        ("Top requests",
         _table(data["request"]["top"], ["request_id", "service", "decision_type", "tier", "tokens", "cost"])),
        ("Weekly leaderboard: tokens per business event (fewest first)",
         _table(data["business"]["weekly_leaderboard"],
                ["week", "business_line", "business_event", "events", "tokens_per_event", "cost_per_event",
                 "events_per_1k_tokens"])),
    ]
    body = "".join(f"<h2>{escape(title)}</h2>{html}" for title, html in sections)
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Jev usage report</title><style>"
            "body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
            "td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}"
            "</style></head><body>"
            f"<h1>Jev usage report</h1><p>{escape(data['since'])} → {escape(data['now'])}</p>{body}</body></html>")
