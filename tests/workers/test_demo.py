"""The demo's reports: requests by language, and the latency split into queueing and service."""
import orjson

from schemas.records import Decision
from workers import workload
from workers.demo import by_language, latency_split


def test_by_language_counts_requests_tiers_and_fine_models_per_language():
    payloads = workload.generate(120, seed=4, chinese_share=0.2)
    bodies = [orjson.loads(p) for p in payloads]
    chinese = [b["request_id"] for b in bodies if b["service"] == "support-zh"]
    decisions = {rid: Decision(request_id=rid, tier="fine", chain=["coarse:lexical:5/6", "fine:e5"])
                 for rid in chinese[:-1]}  # the last Chinese request is still undecided
    english = next(b["request_id"] for b in bodies if b["service"] != "support-zh")
    decisions[english] = Decision(request_id=english, tier="cache_l1")
    report = by_language(payloads, decisions)
    assert report["zh"] == {"requests": len(chinese), "decided": len(chinese) - 1,
                            "tiers": {"fine": len(chinese) - 1}, "fine_models": {"e5": len(chinese) - 1}}
    assert report["en"]["requests"] == len(bodies) - len(chinese) and report["en"]["tiers"] == {"cache_l1": 1}


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
