"""Folded stacks from ClickHouse and the SVG flame graph rendered from them."""

import datetime as dt
import xml.etree.ElementTree as ET

import pytest

from tests.workers.analytics.conftest import NOW, requests_at
from workers.analytics import flamegraph

SVG = "{http://www.w3.org/2000/svg}"


def test_tree_sums_children_into_parents():
    root = flamegraph.tree({"a;b;c": 3, "a;b;d": 2, "a;e": 5})
    assert root["value"] == 10 and root["children"]["a"]["value"] == 10
    assert root["children"]["a"]["children"]["b"]["value"] == 5


@pytest.mark.parametrize(
    "weight, root_title", [("tokens", "all: 1,000 tokens (100.0%)"), ("cost", "all: $0.001000 (100.0%)")]
)
def test_folded_stacks_render_to_an_svg_whose_frames_carry_their_weight(load, weight, root_title):
    client = load(requests_at(1, 4, 100), requests_at(1, 3, 200, service="payments", decision_type="risk", prefix="p"))
    stacks = flamegraph.folded(client, NOW - dt.timedelta(days=1), weight=weight)
    assert set(stacks) == {"acme;search;ranking;score;fine", "acme;payments;risk;score;fine"}
    svg = ET.fromstring(flamegraph.render_svg(stacks, unit=weight))
    titles = [g.find(f"{SVG}title").text for g in svg.iter(f"{SVG}g")]
    assert root_title in titles
    if weight == "tokens":
        assert "payments: 600 tokens (60.0%)" in titles and "search: 400 tokens (40.0%)" in titles
    widths = {
        g.find(f"{SVG}title").text.split(":")[0]: float(g.find(f"{SVG}rect").get("width")) for g in svg.iter(f"{SVG}g")
    }
    assert widths["all"] == pytest.approx(flamegraph.WIDTH)


@pytest.mark.parametrize("tenant, service, expected", [("acme", "payments", 1), ("other", "", 0), ("", "search", 1)])
def test_folded_filters_by_tenant_and_service(load, tenant, service, expected):
    client = load(requests_at(1, 2, 100), requests_at(1, 2, 100, service="payments", prefix="p"))
    assert len(flamegraph.folded(client, NOW - dt.timedelta(days=1), tenant, service)) == expected


def test_empty_window_renders_a_valid_svg():
    svg = ET.fromstring(flamegraph.render_svg({}))
    assert list(svg.iter(f"{SVG}g")) == []
