"""The idempotency state's cost to the garbage collector: a process keeps up to JEV_IDEMPOTENCY_MAX entries, and a
full collection scans every object the collector tracks."""

import gc

import orjson

from schemas.records import Decision, Ranked
from streams.idempotency.requests import NEW, REDELIVERY, Requests, decided_record


def decided(n: int) -> tuple[Requests, list[Decision]]:
    seen, decisions = Requests(), []
    for i in range(n):
        raw = orjson.dumps({"request_id": f"r{i}", "tenant": "t", "state": f"état {i}, 库存 {i}"})
        assert seen.check("t", f"r{i}", raw)[0] == NEW
        decision = Decision(
            request_id=f"r{i}",
            tier="cache_l1",
            action_id="hold",
            text="保持 hold",
            ranking=[Ranked(id=a, score=s) for a, s in (("hold", 0.9), ("ship", 0.1))],
            chain=["cache_l1"],
        )
        seen.decided("t", decision)
        decisions.append(decision)
    return seen, decisions


def test_decided_entries_leave_the_collectors_scans():
    seen, _ = decided(2_000)
    gc.collect()
    tracked = sum(gc.is_tracked(key) or gc.is_tracked(entry) for key, entry in seen.seen.items())
    assert tracked == 0, f"{tracked} of 2,000 entries are scanned by every full collection"


def test_the_first_decision_comes_back_whole_from_memory_and_from_the_log():
    seen, decisions = decided(3)
    restarted = Requests()
    for decision in decisions:
        restarted.apply(decided_record("t", decision)[2])
    for i, decision in enumerate(decisions):
        raw = orjson.dumps({"request_id": f"r{i}", "tenant": "t", "state": f"état {i}, 库存 {i}"})
        assert seen.check("t", f"r{i}", raw) == (REDELIVERY, decision)
        assert restarted.first("t", f"r{i}").to_representation() == decision.to_representation()
