"""The scoring worker's micro-batch handler: decides every work of a batch, sends them on by partition, and
dead-letters an envelope that does not decode without losing the rest."""
import asyncio

from schemas.records import Rejection, Request, UsageBatch, Work, WorkBatch
from schemas.topics import name
from tests.conftest import consumed
from streams.scoring.factory import build_engine
from workers.scoring_worker import ScoringWorker


class Producer:
    """Records what the worker sends; every send is acknowledged at once."""

    def __init__(self):
        self.sent: list[tuple[str, bytes, int | None]] = []

    async def send(self, topic, value, partition=None):
        self.sent.append((topic, value, partition))
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
