"""The demo's reports: requests by language, the latency split into queueing and service, and how far into the
workload L2 first served."""
import orjson

from schemas.records import Decision
from workers import workload
from workers.demo import by_language, first_decided_by, latency_split


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


def test_first_decided_by_counts_the_workload_up_to_the_first_request_a_tier_decided():
    payloads = workload.generate(40, seed=3, reword_share=1.0, chinese_share=0.5)
    ids = [orjson.loads(p)["request_id"] for p in payloads]
    decisions = {rid: Decision(request_id=rid, tier="fine") for rid in ids}
    assert first_decided_by(payloads, decisions, "cache_l2") is None
    decisions[ids[30]] = Decision(request_id=ids[30], tier="cache_l2")
    decisions[ids[12]] = Decision(request_id=ids[12], tier="cache_l2")
    del decisions[ids[5]]  # an undecided request counts as published, not as a hit
    assert first_decided_by(payloads, decisions, "cache_l2") == 13
    assert first_decided_by(payloads, decisions, "fine") == 1
