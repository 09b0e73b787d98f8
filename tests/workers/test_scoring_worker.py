"""The scoring worker's micro-batch handler: decides every work of a batch, sends them on by partition, and
dead-letters an envelope that does not decode without losing the rest."""
import asyncio

from schemas.records import Chunk, Rejection, Request, UsageBatch, Work, WorkBatch
from schemas.topics import name
from tests.conftest import consumed
from streams.scoring.engine import build_engine
from workers.scoring_worker import ScoringWorker


class Producer:
    """Records what the worker sends; every send is acknowledged at once."""

    def __init__(self):
        self.sent: list[tuple[str, bytes, int | None]] = []
        self.keys: list[bytes | None] = []

    async def send(self, topic, value, partition=None, key=None):
        self.sent.append((topic, value, partition))
        self.keys.append(key)
        acked = asyncio.get_running_loop().create_future()
        acked.set_result(None)
        return acked


def work(request_id: str) -> Work:
    request = Request.from_data({"request_id": request_id, "tenant": "acme", "service": "search",
                                 "decision_type": "ranking", "state": "trail running shoes",
                                 "candidates": [{"id": "a", "text": "trail running shoe"},
                                                {"id": "b", "text": "leather loafer"}]})
    return Work(request=request, admitted_at=0.0, model="gpt-4o-mini", context="State: trail running shoes",
                context_tokens=6, candidate_tokens=[3, 2], cache_key=f"k-{request_id}")


async def test_a_batch_is_decided_sent_on_by_partition_and_a_poison_envelope_is_dead_lettered(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.producer = Producer()
    messages = consumed(name("score"), [WorkBatch(items=[work("s1"), work("s2")]).dumps(), b"{not json"])
    messages[0].partition = 3
    await worker.handle(messages)
    by_topic: dict[str, list] = {}
    for topic, value, partition in worker.producer.sent:
        by_topic.setdefault(topic, []).append((value, partition))
    [(scored, partition)] = by_topic[name("scored")]
    decided = WorkBatch.loads(scored).items
    assert partition == 3 and [w.request.request_id for w in decided] == ["s1", "s2"]
    assert all(w.decision.request_id == w.request.request_id and w.decision.action_id in {"a", "b"}
               for w in decided)
    [(rejected, _)] = by_topic[name("rejected")]
    assert Rejection.loads(rejected).reason == "bad_internal_message"
    [(usage, _)] = by_topic[name("usage")]
    assert {e.request_id for e in UsageBatch.loads(usage).events} == {"s1", "s2"}
    assert worker.decided == 2


def streamed_work(request_id: str, client: str) -> Work:
    reference = "\n".join(f"Parcels to depot {i % 5} leave within {i} hours." for i in range(80))
    request = Request.from_data({"request_id": request_id, "tenant": "acme", "service": "support",
                                 "decision_type": "customer_service", "kind": "generate", "stream": True,
                                 "client": client, "question_type": "creative", "state": "When?",
                                 "contracts": {"max_output_tokens": 512}})
    return Work(request=request, admitted_at=0.0, model="gpt-4o-mini", context=reference, context_tokens=900,
                cache_key=f"k-{request_id}")


async def test_streamed_answers_send_their_chunks_in_order_before_their_decisions(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    worker.producer = Producer()
    batch = WorkBatch(items=[streamed_work("w1", "web"), work("plain"), streamed_work("m1", "mobile")]).dumps()
    await worker.handle(consumed(name("score"), [batch]))
    topics = [topic for topic, _, _ in worker.producer.sent]
    chunks = [Chunk.loads(value) for topic, value, _ in worker.producer.sent if topic == name("chunks")]
    last_chunk = max(i for i, t in enumerate(topics) if t == name("chunks"))  # of a paced 512-token stream
    assert topics.index(name("scored")) < last_chunk  # the plain decision does not wait for the streams
    assert max(i for i, t in enumerate(topics) if t == name("chunks")) < len(topics) - 2  # then scored, usage
    scored = [WorkBatch.loads(v).items for t, v, _ in worker.producer.sent if t == name("scored")]
    assert [[w.request.request_id for w in items] for items in scored] == [["plain"], ["w1", "m1"]]
    for rid, size in (("w1", 64), ("m1", 32)):
        mine = [c for c in chunks if c.request_id == rid]
        assert [c.seq for c in mine] == list(range(len(mine))) and mine[-1].final
        assert all(c.tokens <= size for c in mine) and len(mine) >= 512 // size
        decided = next(w for w in scored[1] if w.request.request_id == rid).decision
        assert decided.output_tokens == sum(c.tokens for c in mine)
    assert set(worker.producer.keys) >= {b"w1", b"m1"}
    worker.chunk_sender.cancel()
