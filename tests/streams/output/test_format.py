"""The caller's view of a Decision: body and HTTP headers."""
from __future__ import annotations

from schemas.records import Decision, Ranked
from streams.output.format import decision_body, http_headers

DECISION = Decision(request_id="r1", tier="fine", action_id="b", ranking=[Ranked(id=c, score=s) for c, s in
                    [("b", 0.9), ("a", 0.5), ("c", 0.1)]], confidence=0.8, chain=["rules:miss", "coarse", "fine"],
                    input_tokens=1200, cache_read_tokens=1000, output_tokens=3, nominal_tokens=9000,
                    cost=0.000123456789, latency_ms=42.0)


def test_headers():
    assert http_headers(DECISION) == {
        "X-Request-Id": "r1", "X-Input-Tokens": "1200", "X-Cache-Read-Tokens": "1000", "X-Output-Tokens": "3",
        "X-Cost": "0.00012346", "X-Tier": "fine", "X-Confidence": "0.8000"}


def test_body():
    body = decision_body(DECISION, top_n=2)
    assert body["action"] == "b" and body["tier"] == "fine" and body["chain"] == ["rules:miss", "coarse", "fine"]
    assert body["ranking"] == [{"id": "b", "score": 0.9}, {"id": "a", "score": 0.5}]
    assert body["tokens"] == {"input": 1200, "cache_read": 1000, "output": 3, "nominal": 9000, "saved": 7797}
    assert body["cost"] == 0.00012346 and "text" not in body and "error" not in body


def test_body_of_a_generated_answer():
    body = decision_body(Decision(request_id="r2", tier="llm", text="Paris.", error=""))
    assert body["action"] is None and body["text"] == "Paris."
