"""Crash, outage and poison input on the real local broker and ClickHouse engine: nothing lost, nothing doubled."""

import pytest

from workers.harness.chaos import run_chaos

pytestmark = pytest.mark.integration


async def test_killed_and_restarted_workers_lose_and_double_nothing(settings):
    # Lexical scoring and the hashing L2 embedder: each stage process starts without importing torch and MiniLM
    # (~20 s of CPU), which on a loaded machine took the replacement of the killed one minutes of the 300 s.
    report = await run_chaos(
        settings.replace(backend="lexical", cache_embedder="hashing"),
        150,
        ["faust", "scoring"],
        sink_outage=6.0,
        timeout=300,
    )
    assert report["decided"] == report["pushed"] == 150, {k: report[k] for k in ("kills", "startups", "decide_s")}
    assert report["lost"] == 0 and report["double_counted"] == 0
    assert report["duplicates_differing"] == 0  # a redelivery after a restart gets the first decision again
    assert report["restarts"] == {"faust": 1, "scoring": 1}
    assert report["bad_inputs_caught"] == report["bad_inputs_tried"]
    expected_reasons = {"bad_json", "missing_field", "too_large", "wrong_type", "bad_internal_message"}
    assert expected_reasons <= set(report["rejected_reasons"])
    ch = report["clickhouse"]
    assert ch["spill_drained"] and ch["raw_rows"] == ch["distinct_events"] == ch["final_rows"]
    assert ch["raw_nominal_tokens"] == ch["final_nominal_tokens"]
    assert report["lag_after_drain"] == {"jev.usage.v1": 0, "jev.scored.v1": 0, "spilled_segments": 0}
    assert [k["role"] for k in report["kills"]] == ["faust", "scoring"]
    for kill in report["kills"]:  # every request undecided at a kill was decided after it
        assert kill["recovery_s"] is not None and sum(kill["decided_per_10s"]) == kill["undecided_at_kill"]
    assert report["recovery_s"] == max(k["recovery_s"] for k in report["kills"])


async def test_a_killed_stage_process_of_two_is_recovered_and_its_work_lost_nowhere(settings):
    # One of two stage processes killed: the other takes its partitions of every group (Faust's, ingest's, the
    # budget owners', the verdicts') and decides what it had in flight or queued; recovery_s measures until when.
    report = await run_chaos(
        settings.replace(backend="lexical", cache_embedder="hashing"),
        120,
        ["stage"],
        sink_outage=0.0,
        timeout=300,
        stages=2,
    )
    assert report["decided"] == report["pushed"] == 120
    assert report["lost"] == 0 and report["double_counted"] == 0 and report["duplicates_differing"] == 0
    assert report["restarts"]["stage"] == 1
    (kill,) = report["kills"]
    assert kill["role"] == "stage" and kill["replaced_s"] is not None
    assert kill["recovery_s"] is not None and report["recovery_s"] == kill["recovery_s"]
    assert sum(kill["decided_per_10s"]) == kill["undecided_at_kill"]
