import orjson
import pytest

from schemas.records import Rejection, Work
from streams.core.deadletter import ORIGINAL_MAX
from streams.ingest.decode import Admission, admit
from streams.ingest.templates import Templates
from streams.text import tokens

POLICY = Admission(1_048_576, "gpt-4o-mini", frozenset({"ranking", "risk_interception"}), Templates.from_dir())
BASE = {
    "request_id": "r1",
    "tenant": "acme",
    "service": "search",
    "decision_type": "ranking",
    "state": "Shopper query: trail shoes",
    "history": [{"role": "user", "content": "I run on rocky trails."}],
    "candidates": [{"id": "a", "text": "trail running shoe"}, {"id": "b", "text": "office loafer"}],
}


def run(body, truncate=False):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return admit(raw, POLICY, truncate=truncate, now=100.0)


def test_admitted_work_carries_exact_token_counts():
    work = run(BASE)
    assert isinstance(work, Work)
    assert work.context_tokens == tokens.count(work.context, "gpt-4o-mini")
    assert work.candidate_tokens == [
        tokens.count("trail running shoe", "gpt-4o-mini"),
        tokens.count("office loafer", "gpt-4o-mini"),
    ]
    assert work.sections["candidates"] == sum(work.candidate_tokens)
    assert work.admitted_at == 100.0


@pytest.mark.parametrize(
    "body, reason",
    [
        (b"\x00\x01garbage", "bad_json"),
        ({**BASE, "decision_type": "astrology"}, "unknown_decision_type"),
        ({**BASE, "model": "llama-9000"}, "unknown_model"),
        ({**BASE, "kind": "chat"}, "wrong_value"),
        ({**BASE, "candidates": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "wrong_value"),
        ({**BASE, "contracts": {"max_input_tokens": 3}}, "over_contract"),
        ({**BASE, "contracts": {"max_output_tokens": 5, "min_output_tokens": 9}}, "bad_contract"),
        ({**BASE, "template": {"id": "no-such-template"}}, "unknown_template"),
        ({**BASE, "state": "word " * 3_000_000}, "too_large"),
    ],
)
def test_bad_requests_become_rejections_with_the_original_bytes(body, reason):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    result = run(raw)
    assert isinstance(result, Rejection)
    assert result.reason == reason
    assert result.original.encode("latin-1") == raw[:ORIGINAL_MAX]  # a dead letter keeps at most ORIGINAL_MAX
    assert ("truncated from" in result.detail) == (len(raw) > ORIGINAL_MAX)
    assert result.stage == "ingest"


def test_unknown_model_error_lists_known_models():
    result = run({**BASE, "model": "llama-9000"})
    assert "gpt-4o" in result.detail and "llama-9000" in result.detail


def test_over_contract_history_is_truncated_oldest_first_when_truncation_is_on():
    history = [{"role": "user", "content": f"turn {i}: " + "detail " * 40} for i in range(20)]
    body = {**BASE, "history": history, "contracts": {"max_input_tokens": 200}}
    assert isinstance(run(body), Rejection)
    work = run(body, truncate=True)
    assert isinstance(work, Work)
    assert work.context_tokens <= 200
    assert "turn 19" in work.context and "turn 0:" not in work.context
