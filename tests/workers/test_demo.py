"""The demo's latency split: queueing (admission to the start of work) and service, as percentiles."""
from schemas.records import Decision
from workers.demo import latency_split


def test_latency_splits_into_queue_and_service_per_decision():
    decisions = [Decision(request_id=f"r{i}", tier="fine", latency_ms=100.0 + i, queue_ms=float(i))
                 for i in range(100)]
    decisions.append(Decision(request_id="hit", tier="cache", latency_ms=3.0, queue_ms=0.0))
    split = latency_split(decisions)
    assert set(split) == {"queue_ms", "service_ms", "total_ms"}
    assert set(split["queue_ms"]) == {"p50", "p95", "p99"}
    assert split["queue_ms"]["p99"] == 98.0 and split["queue_ms"]["p50"] == 49.0
    assert split["service_ms"]["p50"] == 100.0 and split["service_ms"]["p99"] == 100.0
    assert split["total_ms"]["p99"] == 198.0
