"""The HTTP caller's view of a Decision: its headers."""

from __future__ import annotations

from schemas.records import Decision, Ranked
from streams.output.format import http_headers

DECISION = Decision(
    request_id="r1",
    tier="fine",
    action_id="b",
    ranking=[Ranked(id=c, score=s) for c, s in [("b", 0.9), ("a", 0.5), ("c", 0.1)]],
    confidence=0.8,
    chain=["rules:miss", "coarse", "fine"],
    input_tokens=1200,
    cache_read_tokens=1000,
    output_tokens=3,
    nominal_tokens=9000,
    cost=0.000123456789,
    latency_ms=42.0,
)


def test_headers():
    assert http_headers(DECISION) == {
        "X-Request-Id": "r1",
        "X-Input-Tokens": "1200",
        "X-Cache-Read-Tokens": "1000",
        "X-Output-Tokens": "3",
        "X-Cost": "0.00012346",
        "X-Tier": "fine",
        "X-Confidence": "0.8000",
    }
