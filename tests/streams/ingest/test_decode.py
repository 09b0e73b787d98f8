import orjson
import pytest

from schemas.records import Rejection, Work
from streams import tokens
from streams.ingest.decode import admit

TYPES = {"ranking", "risk_interception"}
BASE = {"request_id": "r1", "tenant": "acme", "service": "search", "decision_type": "ranking",
        "state": "Shopper query: trail shoes", "history": [{"role": "user", "content": "I run on rocky trails."}],
        "candidates": [{"id": "a", "text": "trail running shoe"}, {"id": "b", "text": "office loafer"}]}


def run(body, **kw):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return admit(raw, max_bytes=1_048_576, default_model="gpt-4o-mini", known_types=TYPES, now=100.0, **kw)


def test_admitted_work_carries_exact_token_counts():
    work = run(BASE)
    assert isinstance(work, Work)
    assert work.context_tokens == tokens.count(work.context, "gpt-4o-mini")
    assert work.candidate_tokens == [tokens.count("trail running shoe", "gpt-4o-mini"),
                                     tokens.count("office loafer", "gpt-4o-mini")]
    assert work.sections["candidates"] == sum(work.candidate_tokens)
    assert work.admitted_at == 100.0


@pytest.mark.parametrize("body, reason", [
    (b"\x00\x01garbage", "bad_json"),
    ({**BASE, "decision_type": "astrology"}, "unknown_decision_type"),
    ({**BASE, "model": "llama-9000"}, "unknown_model"),
    ({**BASE, "kind": "chat"}, "wrong_value"),
    ({**BASE, "candidates": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "wrong_value"),
    ({**BASE, "contracts": {"max_input_tokens": 3}}, "over_contract"),
    ({**BASE, "state": "word " * 3_000_000}, "too_large"),
])
def test_bad_requests_become_rejections_with_the_original_bytes(body, reason):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    result = run(raw)
    assert isinstance(result, Rejection)
    assert result.reason == reason
    assert result.original.encode("latin-1") == raw
    assert result.stage == "ingest"


def test_unknown_model_error_lists_known_models():
    result = run({**BASE, "model": "llama-9000"})
    assert "gpt-4o" in result.detail and "llama-9000" in result.detail
