"""The scoring worker's micro-batch handler: decides every work of a batch, hands them on, and
dead-letters an envelope that does not decode without losing the rest (what it returns, the Sender delivers);
streamed answers go out as chunks through the Sender while the rest of their batch does not wait."""

import asyncio
import threading
import time

from schemas.records import Request, Work, WorkBatch
from schemas.topics import name
from streams.scoring.factory import build_engine
from streams.scoring.microbatch import drive
from tests.conftest import consumed
from workers.processes.scoring_worker import DECIDE_CHUNK, ScoringWorker


class Sender:
    """Records, in order, what the worker hands to the Sender (and what its handler returns, as BatchConsumer
    hands it on); every send is acknowledged at once."""

    def __init__(self):
        self.sent: list[tuple[str, object]] = []

    async def deliver(self, outbox) -> None:
        self.record(outbox)

    async def send(self, outbox) -> list[asyncio.Future]:
        self.record(outbox)
        acked = asyncio.get_running_loop().create_future()
        acked.set_result(None)
        return [acked]

    def record(self, outbox) -> None:
        self.sent += [("chunks", chunk) for chunk in outbox.chunks]
        self.sent += list(outbox.work.items())
        if outbox.usage:
            self.sent.append(("usage", outbox.usage))


def work(request_id: str) -> Work:
    request = Request.from_data(
        {
            "request_id": request_id,
            "tenant": "acme",
            "service": "search",
            "decision_type": "ranking",
            "state": "trail running shoes",
            "candidates": [{"id": "a", "text": "trail running shoe"}, {"id": "b", "text": "leather loafer"}],
        }
    )
    return Work(
        request=request,
        admitted_at=0.0,
        model="gpt-4o-mini",
        context="State: trail running shoes",
        context_tokens=6,
        candidate_tokens=[3, 2],
        cache_key=f"k-{request_id}",
    )


async def test_a_batch_is_decided_sent_on_and_a_poison_envelope_is_dead_lettered(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    messages = consumed(name("score"), [WorkBatch(items=[work("s1"), work("s2")]).dumps(), b"{not json"])
    out = await worker.handle(messages)
    assert list(out.work) == ["scored"]
    decided = out.work["scored"]
    assert [w.request.request_id for w in decided] == ["s1", "s2"]
    assert all(w.decision.request_id == w.request.request_id and w.decision.action_id in {"a", "b"} for w in decided)
    [rejected] = out.dead_letters
    assert rejected.reason == "bad_internal_message" and rejected.stage == "score"
    assert {e.request_id for e in out.usage} == {"s1", "s2"}
    assert worker.decided == 2


def checkout(request_id: str, deadline_ms: int = 60_000) -> Work:
    """A work whose caller waits at most `deadline_ms` from its admission (now)."""
    urgent = work(request_id)
    urgent.request = urgent.request.derive(deadline_ms=deadline_ms)
    urgent.admitted_at = time.time()
    return urgent


async def test_works_with_a_deadline_are_decided_first_and_their_decisions_sent_before_the_rest(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.sender = Sender()
    batch = [work(f"p{i}") for i in range(30)]
    batch[7:7] = [checkout("late", 50_000), checkout("soon", 20_000)]
    out = await worker.handle(consumed(name("score"), [WorkBatch(items=batch).dumps()]))
    sent, first_chunk = [w for t, w in worker.sender.sent if t == "scored"]  # delivered while the rest waited
    assert [w.request.request_id for w in sent] == ["soon", "late"]
    assert all(w.decision.tier == "fine" and w.decision.queue_ms < 60_000 for w in sent)
    assert [w.request.request_id for w in first_chunk] == [f"p{i}" for i in range(DECIDE_CHUNK)]
    rest = out.work["scored"]  # the last chunk, delivered by the consumer once the batch is done
    assert [w.request.request_id for w in rest] == [f"p{i}" for i in range(DECIDE_CHUNK, 30)]
    unordered = drive([worker.engine.deciding(w) for w in batch])  # the whole batch driven together, as it came
    assert {d.request_id: (d.action_id, d.ranking) for d, _ in unordered} == {
        w.request.request_id: (w.decision.action_id, w.decision.ranking) for w in sent + first_chunk + rest
    }


async def test_a_batch_with_a_deadline_is_decided_before_batches_that_queued_earlier_without_one(settings, monkeypatch):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.sender = Sender()
    order, decide_each = [], worker.decide_each
    monkeypatch.setattr(
        worker, "decide_each", lambda works: order.append([w.request.request_id for w in works]) or decide_each(works)
    )
    await worker.deciding.acquire(0.0)  # a batch is being decided
    waiting = [
        asyncio.create_task(worker.handle(consumed(name("score"), [WorkBatch(items=items).dumps()])))
        for items in ([work("a1"), work("a2")], [work("b1")], [work("c1"), checkout("c2")])
    ]
    await asyncio.sleep(0.05)
    assert not order and len(worker.deciding.waiters) == 3
    worker.deciding.release()
    await asyncio.gather(*waiting)
    assert order == [["c2"], ["a1", "a2"], ["b1"], ["c1"]]  # the checkout, then the rest as they queued


async def test_a_large_batch_holds_the_deciding_slot_one_chunk_at_a_time(settings, monkeypatch):
    """A batch with a deadline that arrives while a large batch is being decided waits for one chunk, not for all
    of it."""
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.sender = Sender()
    order, decide_each, waiting = [], worker.decide_each, threading.Event()

    def recording(works):
        order.append([w.request.request_id for w in works])
        assert len(order) > 1 or waiting.wait(10)  # the first chunk is decided until the checkout's batch waits
        return decide_each(works)

    monkeypatch.setattr(worker, "decide_each", recording)
    large = asyncio.create_task(
        worker.handle(
            consumed(name("score"), [WorkBatch(items=[work(f"p{i}") for i in range(3 * DECIDE_CHUNK)]).dumps()])
        )
    )
    while not order:
        await asyncio.sleep(0.001)
    urgent = asyncio.create_task(worker.handle(consumed(name("score"), [WorkBatch(items=[checkout("pay")]).dumps()])))
    while not worker.deciding.waiters:
        await asyncio.sleep(0.001)
    waiting.set()
    await asyncio.gather(large, urgent)
    assert [len(ids) for ids in order] == [DECIDE_CHUNK, 1, DECIDE_CHUNK, DECIDE_CHUNK] and order[1] == ["pay"]


async def test_queue_ms_is_admission_to_the_start_of_the_batch_and_no_more_than_the_latency(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    queued = work("q1")
    queued.admitted_at = time.time() - 2.0  # waited two seconds on the score topic
    before = time.time()
    out = await worker.handle(consumed(name("score"), [WorkBatch(items=[queued]).dumps()]))
    decision = out.work["scored"][0].decision
    assert 2000 <= decision.queue_ms <= (time.time() - before + 2.0) * 1000


def streamed_work(request_id: str, client: str) -> Work:
    reference = "\n".join(f"Parcels to depot {i % 5} leave within {i} hours." for i in range(80))
    request = Request.from_data(
        {
            "request_id": request_id,
            "tenant": "acme",
            "service": "support",
            "decision_type": "customer_service",
            "kind": "generate",
            "stream": True,
            "client": client,
            "question_type": "creative",
            "state": "When?",
            "contracts": {"max_output_tokens": 512},
        }
    )
    return Work(
        request=request,
        admitted_at=0.0,
        model="gpt-4o-mini",
        context=reference,
        context_tokens=900,
        cache_key=f"k-{request_id}",
    )


async def test_streamed_answers_send_their_chunks_in_order_before_their_decisions(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.sender = Sender()
    batch = WorkBatch(items=[streamed_work("w1", "web"), work("plain"), streamed_work("m1", "mobile")]).dumps()
    worker.sender.record(await worker.handle(consumed(name("score"), [batch])))
    topics = [topic for topic, _ in worker.sender.sent]
    chunks = [chunk for topic, chunk in worker.sender.sent if topic == "chunks"]
    last_chunk = max(i for i, t in enumerate(topics) if t == "chunks")  # of a paced 512-token stream
    assert topics.index("scored") < last_chunk  # the plain decision does not wait for the streams
    assert last_chunk < len(topics) - 2 and topics[-2:] == ["scored", "usage"]  # then the streamed decisions
    scored = [works for topic, works in worker.sender.sent if topic == "scored"]
    assert [[w.request.request_id for w in items] for items in scored] == [["plain"], ["w1", "m1"]]
    for rid, size in (("w1", 64), ("m1", 32)):
        mine = [c for c in chunks if c.request_id == rid]
        assert [c.seq for c in mine] == list(range(len(mine))) and mine[-1].final
        assert all(c.tokens <= size for c in mine) and len(mine) >= 512 // size
        decided = next(w for w in scored[1] if w.request.request_id == rid).decision
        assert decided.output_tokens == sum(c.tokens for c in mine)
    worker.chunk_sender.cancel()
