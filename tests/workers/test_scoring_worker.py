"""The scoring worker's micro-batch handler: decides every work of a batch, hands them on, and
dead-letters an envelope that does not decode without losing the rest (what it returns, the Sender delivers)."""
from schemas.records import Request, Work, WorkBatch
from schemas.topics import name
from tests.conftest import consumed
from streams.scoring.factory import build_engine
from workers.scoring_worker import ScoringWorker


def work(request_id: str) -> Work:
    request = Request.from_data({"request_id": request_id, "tenant": "acme", "service": "search",
                                 "decision_type": "ranking", "state": "trail running shoes",
                                 "candidates": [{"id": "a", "text": "trail running shoe"},
                                                {"id": "b", "text": "leather loafer"}]})
    return Work(request=request, admitted_at=0.0, model="gpt-4o-mini", context="State: trail running shoes",
                context_tokens=6, candidate_tokens=[3, 2], cache_key=f"k-{request_id}")


async def test_a_batch_is_decided_sent_on_and_a_poison_envelope_is_dead_lettered(settings):
    worker = ScoringWorker(settings, engine=build_engine(settings.replace(backend="lexical")))
    messages = consumed(name("score"), [WorkBatch(items=[work("s1"), work("s2")]).dumps(), b"{not json"])
    out = await worker.handle(messages)
    assert list(out.work) == ["scored"]
    decided = out.work["scored"]
    assert [w.request.request_id for w in decided] == ["s1", "s2"]
    assert all(w.decision.request_id == w.request.request_id and w.decision.action_id in {"a", "b"}
               for w in decided)
    [rejected] = out.dead_letters
    assert rejected.reason == "bad_internal_message" and rejected.stage == "score"
    assert {e.request_id for e in out.usage} == {"s1", "s2"}
    assert worker.decided == 2
