"""The scoring worker's shadow side: naive twins are decided only between served batches, go on to the scored
topic on their partition with shadow usage, and a twin too old is dropped with a usage row."""
import asyncio
import time

from schemas.records import UsageBatch, WorkBatch
from schemas.topics import name
from streams.scoring.engine import build_engine
from tests.conftest import consumed
from tests.workers.test_scoring_worker import Producer, work
from workers.scoring_worker import ScoringWorker


def twin(request_id: str, admitted_at: float):
    w = work(request_id)
    w.shadow, w.admitted_at = "naive", admitted_at
    return w


async def test_twins_wait_for_served_work_and_stale_ones_are_dropped(settings):
    worker = ScoringWorker(settings.replace(shadow_max_age_ms=60_000),
                           engine=build_engine(settings.replace(backend="lexical")))
    worker.producer = Producer()
    messages = consumed(name("shadow"), [WorkBatch(items=[twin("n1", time.time()),
                                                          twin("n2", time.time() - 3600)]).dumps()])
    messages[0].partition = 2
    with worker.shadow.served_batch():  # a served batch is being decided
        shadow = asyncio.create_task(worker.shadow.handle(messages))
        await asyncio.sleep(0.2)
        assert not worker.producer.sent, "shadow work ran while a served batch was being decided"
    await shadow
    by_topic: dict[str, list] = {}
    for topic, value, partition in worker.producer.sent:
        by_topic.setdefault(topic, []).append((value, partition))
    [(scored, partition)] = by_topic[name("scored")]
    decided = WorkBatch.loads(scored).items
    assert partition == 2 and [(w.request.request_id, w.shadow) for w in decided] == [("n1", "naive")]
    assert decided[0].decision.action_id in {"a", "b"}
    events = [e for value, _ in by_topic[name("usage")] for e in UsageBatch.loads(value).events]
    assert {(e.request_id, e.stage, e.outcome) for e in events if e.request_id == "n2"} == {
        ("n2", "shadow", "dropped:age")}
    assert all(e.stage == "shadow" and e.nominal_tokens == 0 for e in events)
    assert (worker.shadow.decided, worker.shadow.dropped) == (1, 1)


async def test_under_steady_served_load_twins_are_dropped_not_held(settings):
    worker = ScoringWorker(settings.replace(shadow_max_age_ms=300),
                           engine=build_engine(settings.replace(backend="lexical")))
    worker.producer = Producer()
    with worker.shadow.served_batch():  # served work never pauses
        await asyncio.wait_for(worker.shadow.handle(consumed(name("shadow"), [
            WorkBatch(items=[twin("n1", time.time())]).dumps()])), timeout=5)
    assert (worker.shadow.decided, worker.shadow.dropped) == (0, 1)
    assert not [t for t, _, _ in worker.producer.sent if t == name("scored")]
