import orjson

from schemas.records import Decision
from workers import workload
from workers.demo import by_language


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
