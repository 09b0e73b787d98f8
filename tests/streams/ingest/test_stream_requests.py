"""Ingest admits a streaming request only when it can stream: a generate request of a configured client and
question type; its budget reservation holds the stream's planned length, not the contract's maximum."""

import orjson
import pytest

from schemas.records import Rejection, Work
from streams.budgets.book import BudgetBook, Reservation
from streams.budgets.reserve import reserve_request
from streams.ingest.decode import Admission, admit
from streams.output import chunks as stream_config

POLICY = Admission(
    1_048_576, "gpt-4o-mini", frozenset({"customer_service", "ranking"}), stream_config=stream_config.load()
)
STREAM = {
    "request_id": "q1",
    "tenant": "acme",
    "service": "support",
    "decision_type": "customer_service",
    "kind": "generate",
    "stream": True,
    "state": "How long does delivery take?",
    "contracts": {"max_output_tokens": 1000},
}


def run(body):
    return admit(orjson.dumps(body), POLICY, now=100.0)


@pytest.mark.parametrize(
    "change, detail",
    [
        ({"kind": "decide"}, "stream: true needs kind 'generate'"),
        ({"candidates": [{"id": "a", "text": "x"}]}, "stream: true needs kind 'generate'"),
        ({"client": "watch"}, "client 'watch' is not configured"),
        ({"question_type": "poetry"}, "question_type 'poetry' is not configured"),
    ],
)
def test_a_request_that_cannot_stream_is_rejected_with_the_fix(change, detail):
    rejected = run({**STREAM, **change})
    assert isinstance(rejected, Rejection) and rejected.reason == "wrong_value" and detail in rejected.detail


@pytest.mark.parametrize(
    "change, output",
    [
        ({}, 128),
        ({"question_type": "creative"}, 512),
        ({"client": "mobile", "question_type": "fact"}, 128),
        ({"stream": False}, 1000),
    ],
)
async def test_the_reservation_holds_the_planned_length(change, output):
    work = run({**STREAM, **change})
    assert isinstance(work, Work)
    book = BudgetBook()
    held = await reserve_request(book, None, work, POLICY.stream_config)  # no leases: the local book alone
    assert isinstance(held, Reservation) and held.tokens == work.context_tokens + output
