"""`jev replay`: recorded requests re-scored from the real broker and compared with recorded decisions."""

import pytest

from schemas.records import Decision
from schemas.topics import name
from streams.ingest.decode import Admission
from streams.scoring.factory import build_engine
from workers.harness import workload
from workers.harness.pipeline import Pipeline, known_decision_types
from workers.harness.replay import compare, read_topic, since_ms

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("window, ok", [("7d", True), ("30m", True), ("7", False), ("week", False), ("", False)])
def test_since_parses_windows_and_names_the_format(window, ok):
    if ok:
        assert since_ms(window) > 0
    else:
        with pytest.raises(ValueError, match="e.g. 30m"):
            since_ms(window)


async def test_replay_with_the_same_configuration_agrees(settings, clickhouse_dsn, usage_db):
    settings = settings.replace(backend="lexical", clickhouse_dsn=clickhouse_dsn)
    async with Pipeline(settings, known_decision_types()) as pipe:
        await pipe.publish(workload.generate(40, seed=11, repeat_share=0.0))
        decided, _ = await pipe.collect(40, 0, timeout=120)
        requests = await read_topic(pipe.settings.bootstrap, name("requests"), since_ms("1h"))
        decisions = await read_topic(pipe.settings.bootstrap, name("decisions"), since_ms("1h"))
    assert len(decided) == 40
    recorded = {d.request_id: d for d in (Decision.loads(m.value) for m in decisions)}
    admission = Admission(settings.max_record_bytes, settings.default_model, frozenset(known_decision_types()))
    summary = compare(build_engine(settings), admission, [m.value for m in requests], recorded)
    answered_by_models = sum(not d.tier.startswith("cache") for d in recorded.values())
    assert summary["replayed"] == 40 and summary["compared"] == answered_by_models >= 20
    assert summary["agreement"] >= 0.9
    assert summary["tokens_replayed"] == summary["tokens_recorded"] == 0, "the lexical tier spends no model tokens"
