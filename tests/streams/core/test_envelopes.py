"""Internal envelopes stay under the broker's message size however many upstream batches a stage takes."""

from schemas.records import Request, Work, WorkBatch
from streams.core.envelopes import BATCH_TARGET_BYTES, encode_batches


def work(i: int, state: str) -> Work:
    return Work(
        request=Request(request_id=f"r{i}", tenant="acme", service="s", decision_type="ranking", state=state),
        admitted_at=0.0,
        model="gpt-4o-mini",
    )


def test_envelopes_are_bounded_and_keep_every_item_in_order():
    works = [work(i, "x" * 3000) for i in range(600)]  # ~1.8 MB in all
    envelopes = encode_batches(works)
    assert len(envelopes) > 1 and all(len(e) <= BATCH_TARGET_BYTES + 16 for e in envelopes)
    decoded = [w for e in envelopes for w in WorkBatch.loads(e).items]
    assert [w.request.request_id for w in decoded] == [f"r{i}" for i in range(600)]
    assert decoded[7].request.state == works[7].request.state


def test_an_item_larger_than_the_target_travels_alone():
    works = [work(0, "small"), work(1, "y" * (BATCH_TARGET_BYTES + 10)), work(2, "small")]
    envelopes = encode_batches(works)
    assert [[w.request.request_id for w in WorkBatch.loads(e).items] for e in envelopes] == [["r0"], ["r1"], ["r2"]]
