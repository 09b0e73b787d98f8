import pytest

from schemas.records import Candidate, Request, Turn
from streams import tokens
from streams.ingest.prompt import count_sections


def request(**kw):
    base = dict(request_id="r1", tenant="acme", service="search", decision_type="ranking",
                state={"query": "red shoes", "locale": "en-US"},
                history=[Turn(role="user", content="show me shoes"), Turn(role="assistant", content="here are some")],
                candidates=[Candidate(id="a", text="red running shoes"), Candidate(id="b", text="blue sandals")])
    return Request(**(base | kw))


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-3.5-turbo"])
def test_sections_are_exact_per_part(model):
    sections = count_sections(request(), model, system="You rank results.", template="Rank these.")
    assert sections == {
        "system": tokens.count("You rank results.", model),
        "template": tokens.count("Rank these.", model),
        "history": tokens.count("user: show me shoes", model) + tokens.count("assistant: here are some", model),
        "state": tokens.count('{"locale":"en-US","query":"red shoes"}', model),
        "candidates": tokens.count("red running shoes", model) + tokens.count("blue sandals", model),
    }


def test_empty_sections_count_zero():
    sections = count_sections(request(history=[], candidates=[], state=""), "gpt-4o")
    assert sections == {"system": 0, "template": 0, "history": 0, "state": 0, "candidates": 0}
