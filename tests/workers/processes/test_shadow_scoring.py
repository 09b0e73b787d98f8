"""The scoring worker's shadow side: naive twins are decided only between served batches, go on to the scored
topic (by cache key, as served work does) with shadow usage, and a twin too old is dropped with a usage row."""

import asyncio
import threading
import time

from schemas.records import WorkBatch
from schemas.topics import name
from streams.models.extractive import ExtractiveGenerator
from streams.scoring.factory import build_engine
from tests.conftest import consumed
from tests.workers.processes.test_scoring_worker import streamed_work, work
from workers.processes.scoring_worker import ScoringWorker
from workers.processes.shadow_scoring import Deciding


def twin(request_id: str, admitted_at: float):
    w = work(request_id)
    w.shadow, w.admitted_at = "naive", admitted_at
    return w


async def test_twins_wait_for_served_work_and_stale_ones_are_dropped(settings):
    worker = ScoringWorker(
        settings.replace(shadow_max_age_ms=60_000), engine=build_engine(settings.replace(backend="lexical"))
    )
    messages = consumed(
        name("shadow"),
        [WorkBatch(items=[twin("n1", time.time()), twin("n2", time.time() - 3600)]).dumps(), b"{not json"],
    )
    with worker.shadow.served_batch():  # a served batch is being decided
        shadow = asyncio.create_task(worker.shadow.handle(messages))
        await asyncio.sleep(0.2)
        assert not shadow.done() and worker.shadow.decided == 0, (
            "shadow work ran while a served batch was being decided"
        )
    out = await shadow
    assert list(out.work) == ["scored"]
    decided = out.work["scored"]
    assert [(w.request.request_id, w.shadow, w.cache_key) for w in decided] == [("n1", "naive", "k-n1")]
    assert decided[0].decision.action_id in {"a", "b"}
    assert {(e.request_id, e.stage, e.outcome) for e in out.usage if e.request_id == "n2"} == {
        ("n2", "shadow", "dropped:age")
    }
    assert {e.request_id for e in out.usage} == {"n1", "n2"}
    assert all(e.stage == "shadow" and e.nominal_tokens == 0 for e in out.usage)
    [rejected] = out.dead_letters
    assert rejected.reason == "bad_internal_message"
    assert (worker.shadow.decided, worker.shadow.dropped) == (1, 1)


async def test_under_steady_served_load_twins_are_dropped_not_held(settings):
    worker = ScoringWorker(
        settings.replace(shadow_max_age_ms=300), engine=build_engine(settings.replace(backend="lexical"))
    )
    with worker.shadow.served_batch():  # served work never pauses
        out = await asyncio.wait_for(
            worker.shadow.handle(consumed(name("shadow"), [WorkBatch(items=[twin("n1", time.time())]).dumps()])),
            timeout=5,
        )
    assert (worker.shadow.decided, worker.shadow.dropped) == (0, 1)
    assert "scored" not in out.work and [e.outcome for e in out.usage] == ["dropped:age"]


async def test_a_twin_never_decides_beside_a_served_batch(settings):
    worker = ScoringWorker(
        settings.replace(shadow_max_age_ms=60_000), engine=build_engine(settings.replace(backend="lexical"))
    )
    served = [work("s1")]
    worker.shadow.deciding.acquire()  # a served batch is deciding in its worker thread (decide_each holds this)
    try:
        shadow = asyncio.create_task(
            worker.shadow.handle(consumed(name("shadow"), [WorkBatch(items=[twin("n1", time.time())]).dumps()]))
        )
        await asyncio.sleep(0.3)
        assert not shadow.done() and worker.shadow.decided == 0, "a twin was decided beside a served batch"
    finally:
        worker.shadow.deciding.release()
    out = await asyncio.wait_for(shadow, timeout=10)
    assert [w.request.request_id for w in out.work["scored"]] == ["n1"]
    assert not worker.shadow.deciding.locked()
    [(decision, _)] = worker.decide_each(served)  # the served side takes the same lock and gives it back
    assert decision.request_id == "s1" and not worker.shadow.deciding.locked()


class Held(ExtractiveGenerator):
    """A generator whose answers wait until `go` is set: a model server busy with other answers."""

    def __init__(self):
        super().__init__()
        self.go, self.asked = threading.Event(), threading.Event()

    def generate(self, prompt, max_tokens):
        self.asked.set()
        assert self.go.wait(10), "never released"
        return super().generate(prompt, max_tokens)


async def test_a_generate_twin_waiting_on_its_model_holds_no_served_batch_back(settings):
    """A support question's twin is answered by the generator (a model server, seconds away) without the lock the
    scoring backends need: a served batch (a checkout screening) is decided meanwhile, not after the answer."""
    worker = ScoringWorker(
        settings.replace(shadow_max_age_ms=60_000), engine=build_engine(settings.replace(backend="lexical"))
    )
    worker.shadow.engine.generator = held = Held()
    question = streamed_work("q1", "web")
    question.shadow, question.admitted_at = "naive", time.time()
    shadow = asyncio.create_task(
        worker.shadow.handle(consumed(name("shadow"), [WorkBatch(items=[question, twin("n1", time.time())]).dumps()]))
    )
    assert await asyncio.to_thread(held.asked.wait, 10)
    [(decision, _)] = await asyncio.wait_for(asyncio.to_thread(worker.decide_each, [work("s1")]), timeout=5)
    assert decision.request_id == "s1" and decision.tier == "fine" and not shadow.done()
    held.go.set()
    out = await asyncio.wait_for(shadow, timeout=10)
    assert {w.request.request_id: w.decision.tier for w in out.work["scored"]} == {"q1": "llm", "n1": "fine"}


async def test_a_served_decision_waits_for_the_twin_in_flight_not_the_twins_queued_behind_it(settings):
    """Under load a checkout screening fell back on its deadline while a chunk of twins was decided under one hold
    of the lock: served work now goes between two twins."""
    worker = ScoringWorker(
        settings.replace(shadow_max_age_ms=60_000), engine=build_engine(settings.replace(backend="lexical"))
    )
    naive = worker.shadow.engine
    decide_batch, started, twins_decided = naive.decide_batch, threading.Event(), []

    def slow(works):  # a naive decision on a busy machine
        started.set()
        time.sleep(0.2)
        results = decide_batch(works)
        twins_decided.extend(w.request.request_id for w in works)
        return results

    naive.decide_batch = slow
    shadow = asyncio.create_task(
        worker.shadow.handle(
            consumed(name("shadow"), [WorkBatch(items=[twin(f"n{i}", time.time()) for i in range(4)]).dumps()])
        )
    )
    assert await asyncio.to_thread(started.wait, 10)
    [(decision, _)] = await asyncio.wait_for(asyncio.to_thread(worker.decide_each, [work("s1")]), timeout=5)
    before = list(twins_decided)
    out = await asyncio.wait_for(shadow, timeout=10)
    assert decision.request_id == "s1" and decision.tier == "fine"
    assert before == ["n0"]  # the twin in flight, none of the three queued behind it
    assert [w.request.request_id for w in out.work["scored"]] == ["n0", "n1", "n2", "n3"]
    assert not worker.shadow.deciding.locked()


def test_the_deciding_lock_lets_served_work_ahead_of_waiting_twins():
    deciding, order = Deciding(), []
    deciding.acquire()  # a twin is being decided

    def take(who, served):
        with deciding if served else deciding.for_shadow():
            order.append(who)

    twin_thread = threading.Thread(target=take, args=("twin", False))
    twin_thread.start()
    time.sleep(0.1)  # the twin waits first
    served_thread = threading.Thread(target=take, args=("served", True))
    served_thread.start()
    time.sleep(0.1)
    deciding.release()
    twin_thread.join(5)
    served_thread.join(5)
    assert order == ["served", "twin"] and not deciding.locked()
