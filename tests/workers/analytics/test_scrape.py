"""The metrics contract's helpers: which series the rules and dashboard read, and what a set of scrapes lacks."""

from workers.analytics.scrape import (
    BROKER_LOSS_ONLY,
    GPU_ONLY,
    SERVER_CACHE_ONLY,
    labelled_samples,
    missing_or_still,
    referenced_series,
    totals,
)
from workers.harness.demo import write_scrapes

SCRAPE = """# HELP jev_decisions_total Decisions made.
# TYPE jev_decisions_total counter
jev_decisions_total{decision_type="ranking",tier="fine"} 3.0
# HELP jev_breaker_trips_total Circuit breakers tripped.
# TYPE jev_breaker_trips_total counter
jev_breaker_trips_total{breaker="token_cap"} 0.0
"""


def test_referenced_series_name_their_readers_and_leave_gpu_ones_out_without_a_gpu():
    wanted = referenced_series()
    assert "alert JevBreakerTripping" in wanted["jev_breaker_trips_total"]
    assert GPU_ONLY <= set(wanted) and not GPU_ONLY & set(referenced_series(gpu=False))
    assert BROKER_LOSS_ONLY <= set(wanted) and not BROKER_LOSS_ONLY & set(referenced_series(broker_loss=False))
    assert SERVER_CACHE_ONLY <= set(wanted) and not SERVER_CACHE_ONLY & set(referenced_series(server_cache=False))


def test_missing_and_zero_series_are_told_apart():
    assert missing_or_still(
        [SCRAPE], ["jev_decisions_total", "jev_breaker_trips_total", "jev_consumer_lag_messages"]
    ) == {"jev_breaker_trips_total": "zero", "jev_consumer_lag_messages": "missing"}
    assert labelled_samples(SCRAPE)['jev_decisions_total{decision_type="ranking",tier="fine"}'] == 3.0


def test_demo_writes_every_process_scrape(tmp_path):
    out = tmp_path / "metrics.prom"
    summary = write_scrapes({"stages-1": SCRAPE, "scoring-2": SCRAPE}, str(out))["metrics"]
    text = out.read_text()
    assert text.count("# TYPE jev_decisions_total counter") == 1
    assert 'jev_decisions_total{process="stages-1",decision_type="ranking",tier="fine"} 3.0' in text
    assert labelled_samples(text)['jev_decisions_total{decision_type="ranking",process="scoring-2",tier="fine"}'] == 3.0
    assert summary["processes"] == ["scoring-2", "stages-1"]
    assert summary["not_moved"]["jev_breaker_trips_total"] == "zero"
    assert summary["series"]["jev_decisions_total"] == 6.0 and summary["series"]["jev_breaker_trips_total"] == 0.0


def test_totals_sum_label_sets_and_count_a_histogram_by_its_inf_bucket():
    histogram = """# HELP jev_stage_latency_seconds Seconds.
# TYPE jev_stage_latency_seconds histogram
jev_stage_latency_seconds_bucket{stage="ingest",le="0.1"} 2.0
jev_stage_latency_seconds_bucket{stage="ingest",le="+Inf"} 3.0
jev_stage_latency_seconds_count{stage="ingest"} 3.0
jev_stage_latency_seconds_sum{stage="ingest"} 0.4
"""
    summed = totals([SCRAPE, SCRAPE, histogram])
    assert summed["jev_decisions_total"] == 6.0 and summed["jev_stage_latency_seconds_bucket"] == 3.0


def test_merged_scrapes_pass_promtool(tmp_path):
    import shutil
    import subprocess
    from pathlib import Path

    import pytest
    from prometheus_client import REGISTRY, generate_latest

    from streams.core import metrics

    tool = shutil.which("promtool") or str(Path(__file__).resolve().parents[3] / ".ci/tools/promtool")
    if not Path(tool).is_file():
        pytest.skip("promtool is not installed (.ci/run extracts it from Debian's prometheus package)")
    metrics.declare_known_series()
    metrics.observe_stage("ingest", 0.0, 0.01)
    text = generate_latest(REGISTRY).decode()
    out = tmp_path / "metrics.prom"
    write_scrapes({"stages-1": text, "scoring-2": text}, str(out))
    done = subprocess.run([tool, "check", "metrics"], input=out.read_text(), capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
