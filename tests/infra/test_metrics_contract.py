"""The metrics contract: every series an alert rule or a dashboard panel reads is recorded by the product. A short
pipeline run that should move each of them (token-cap and deadline breaker trips and their fallbacks, and a forged
usage record, included), every process scraped over its own /metrics port; a referenced series missing from all
scrapes, or never above zero, fails. The series only a broker that lost its logs moves are checked by
tests/integration/test_broker_restart.py."""

import asyncio
from pathlib import Path

import orjson
import pytest

from schemas.topics import name
from workers.analytics.scrape import gpu_present, labelled_samples, missing_or_still, referenced_series, samples
from workers.harness import workload
from workers.harness.chaos import send_raw
from workers.harness.demo import DEADLINE_SHARE
from workers.harness.pipeline import Pipeline, known_decision_types

pytestmark = pytest.mark.integration
BUNDLED_TYPES = Path(__file__).resolve().parents[2] / "streams/scoring/decision_types.yaml"


def tight_ranking_cap(tmp_path: Path) -> str:
    """The bundled decision types with a 10-token cap on ranking: every ranking request the model tier takes
    trips the token breaker and falls back."""
    text = BUNDLED_TYPES.read_text()
    assert "  ranking: {}\n" in text
    path = tmp_path / "decision_types.yaml"
    path.write_text(text.replace("  ranking: {}\n", "  ranking: {token_cap: 10}\n"))
    return str(path)


def spent_deadlines(payloads: list[bytes]) -> list[bytes]:
    """The workload with its checkout deadlines cut to 1 ms: spent on the hops between admission and the scoring
    worker, so each such screening no rule answers trips the deadline breaker, however fast the machine."""
    bodies = [orjson.loads(p) for p in payloads]
    return [orjson.dumps({**b, "deadline_ms": 1} if b.get("deadline_ms") else b) for b in bodies]


def test_referenced_series_cover_every_alert_and_panel():
    wanted = referenced_series()
    assert {
        "jev_breaker_trips_total",
        "jev_stage_latency_seconds_bucket",
        "jev_consumer_lag_messages",
        "jev_usage_rows_total",
        "jev_cache_lookups_total",
    } <= set(wanted)


async def test_every_referenced_series_moves_in_a_pipeline_run(settings, tmp_path):
    settings = settings.replace(decision_types=tight_ranking_cap(tmp_path), lag_export_s=0.5)
    payloads = spent_deadlines(workload.generate(80, seed=11, deadline_share=DEADLINE_SHARE))
    scrapes: list[str] = []
    async with Pipeline(
        settings, known_decision_types(settings.decision_types), stages_process=True, metrics=True
    ) as pipe:
        first = await asyncio.to_thread(pipe.scrape_metrics)
        assert len(first) == 2, f"expected the stage process and a scoring worker, scraped {sorted(first)}"
        await pipe.publish(payloads[:40])
        await send_raw(pipe.settings.bootstrap, [(name("usage"), b'{"events": []}')])  # unsigned: a forgery
        await pipe.collect(40, 0, timeout=180)
        await pipe.publish(payloads[40:])  # repeats of the first wave: cache hits
        collecting = asyncio.create_task(pipe.collect(80, 0, timeout=180))
        while not collecting.done():
            scrapes += (await asyncio.to_thread(pipe.scrape_metrics)).values()
            await asyncio.sleep(0.5)
        decisions, _ = collecting.result()
        wanted = referenced_series(gpu=gpu_present(), broker_loss=False, server_cache=False)  # no model server
        for _ in range(40):  # the usage sink inserts once a second: wait for its last counts
            final = await asyncio.to_thread(pipe.scrape_metrics)
            if not missing_or_still(scrapes + list(final.values()), wanted) and all(
                samples(text).get("jev_usage_rows_total") for name, text in final.items() if name.startswith("stages")
            ):
                break
            await asyncio.sleep(0.5)
        scrapes += final.values()
    assert len(decisions) == 80
    assert any(d.chain and d.chain[0].startswith("fallback:token_cap") for d in decisions.values())
    assert any(d.chain and d.chain[0] == "fallback:deadline:policy" for d in decisions.values())
    trips = {
        b: sum(labelled_samples(text).get(f'jev_breaker_trips_total{{breaker="{b}"}}', 0.0) for text in final.values())
        for b in ("deadline", "token_cap", "timeout")
    }
    assert trips["deadline"] > 0 and trips["token_cap"] > 0, trips
    assert missing_or_still(scrapes, wanted) == {}
    assert not any('level="miss"' in text for text in scrapes)  # a miss keeps the level it missed in
    assert any('jev_cache_lookups_total{level="l1",result="miss"}' in text for text in scrapes)
    assert missing_or_still(list(first.values()), ["jev_usage_rows_total", "jev_breaker_trips_total"]) == {
        "jev_usage_rows_total": "zero",
        "jev_breaker_trips_total": "zero",
    }  # present from the start, at zero
