"""Token flame graphs: folded stacks (tenant;service;decision_type;stage;section) from ClickHouse, rendered
as a self-contained interactive SVG (hover a frame for its tokens, click to zoom, click the root to reset).
"""

from __future__ import annotations

import datetime as dt
import zlib
from html import escape

WEIGHTS = {
    "tokens": "toFloat64(sum(input_tokens) + sum(output_tokens))",
    "cost": "sum(cost)",
    "nominal": "toFloat64(sum(nominal_tokens))",
}
WIDTH, FRAME_H, FONT = 1200, 18, 12
PALETTE = ["#e8743b", "#f2a541", "#f7c873", "#d9593d", "#edb458", "#e49a52", "#f08a4b", "#d96c3f"]


def folded(client, since: dt.datetime, tenant: str = "", service: str = "", weight: str = "tokens") -> dict[str, float]:
    """{stack: weight} over the window, from the hourly per-frame aggregate."""
    if weight not in WEIGHTS:
        raise ValueError(f"--weight {weight!r}: choose one of {', '.join(WEIGHTS)}")
    where = ["hour >= toStartOfHour({since:DateTime64(3)})"]
    where += ["tenant = {tenant:String}"] if tenant else []
    where += ["service = {service:String}"] if service else []
    result = client.query(
        f"SELECT stack, {WEIGHTS[weight]} AS w FROM usage_by_stack_hour WHERE {' AND '.join(where)} "
        "GROUP BY stack HAVING w > 0 ORDER BY stack",
        parameters={"since": since, "tenant": tenant, "service": service},
    )
    return {stack: float(w) for stack, w in result.result_rows}


def tree(stacks: dict[str, float]) -> dict:
    """Nested frames {name, value, children} with "all" at the root."""
    root = {"name": "all", "value": 0.0, "children": {}}
    for stack, value in stacks.items():
        root["value"] += value
        node = root
        for frame in filter(None, stack.split(";")):
            node = node["children"].setdefault(frame, {"name": frame, "value": 0.0, "children": {}})
            node["value"] += value
    return root


def _fmt(value: float, unit: str) -> str:
    return f"${value:,.6f}" if unit == "cost" else f"{value:,.0f} {unit}"


def _frames(
    node: dict, x: float, depth: int, bottom: int, scale: float, unit: str, total: float, path: str, out: list[str]
) -> None:
    """Append the SVG of `node` and its children; depth 0 (the root) sits at y = bottom."""
    w = node["value"] * scale
    if w < 0.5:
        return
    y = bottom - depth * FRAME_H
    label = f"{node['name']}: {_fmt(node['value'], unit)} ({node['value'] / total:.1%})" if total else node["name"]
    color = PALETTE[zlib.crc32(node["name"].encode()) % len(PALETTE)] if depth else "#c0c0c0"
    chars = int((w - 6) / (FONT * 0.6))
    text = node["name"] if len(node["name"]) <= chars else (node["name"][: chars - 2] + ".." if chars > 3 else "")
    out.append(
        f'<g class="f" data-x="{x:.2f}" data-w="{w:.2f}" data-d="{depth}" data-p="{escape(path)}">'
        f'<title>{escape(label)}</title><rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{FRAME_H - 1}" '
        f'fill="{color}" rx="2"/><text x="{x + 3:.2f}" y="{y + FONT + 1}">{escape(text)}</text></g>'
    )
    for child in sorted(node["children"].values(), key=lambda c: c["name"]):
        _frames(child, x, depth + 1, bottom, scale, unit, total, f"{path};{child['name']}", out)
        x += child["value"] * scale


def _depth(node: dict) -> int:
    return 1 + max((_depth(c) for c in node["children"].values()), default=0)


ZOOM_JS = """<script><![CDATA[
document.querySelectorAll('g.f').forEach(function (g) { g.addEventListener('click', function () {
  var x0 = +g.dataset.x, w0 = +g.dataset.w, p = g.dataset.p, s = WIDTH / w0;
  document.querySelectorAll('g.f').forEach(function (h) {
    var inside = h.dataset.p === p || h.dataset.p.indexOf(p + ';') === 0 || p.indexOf(h.dataset.p + ';') === 0;
    var x = (+h.dataset.x - x0) * s, w = +h.dataset.w * s, r = h.querySelector('rect'), t = h.querySelector('text');
    if (p.indexOf(h.dataset.p + ';') === 0) { x = 0; w = WIDTH; }
    h.style.display = inside ? '' : 'none';
    r.setAttribute('x', x); r.setAttribute('width', w); t.setAttribute('x', x + 3);
  });
}); });
]]></script>"""


def render_svg(stacks: dict[str, float], title: str = "Token flame graph", unit: str = "tokens", note: str = "") -> str:
    """An SVG document: one <g class="f"> per frame with a <title> tooltip carrying its weight; `note` (why the
    frames show what they show) goes under the title."""
    root = tree(stacks)
    depth = _depth(root)
    top = 40
    height = top + depth * FRAME_H + 10
    scale = WIDTH / root["value"] if root["value"] else 0.0
    body: list[str] = []
    if root["value"]:
        _frames(root, 0.0, 0, top + (depth - 1) * FRAME_H, scale, unit, root["value"], "all", body)
    subtitle = f"total {_fmt(root['value'], unit)}" if root["value"] else f"no {unit} in the window"
    height += 18 if note else 0
    notes = (
        f'<text x="{WIDTH / 2}" y="{height - 6}" text-anchor="middle" fill="#555">{escape(note)}</text>\n'
        if note
        else ""
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT}">\n'
        f'<text x="{WIDTH / 2}" y="18" text-anchor="middle" font-size="16">{escape(title)}</text>\n'
        f'<text x="{WIDTH / 2}" y="34" text-anchor="middle" fill="#555">{escape(subtitle)} · click a frame '
        f"to zoom, the root to reset</text>\n"
        + notes
        + "\n".join(body)
        + "\n"
        + ZOOM_JS.replace("WIDTH", str(WIDTH))
        + "\n</svg>\n"
    )
