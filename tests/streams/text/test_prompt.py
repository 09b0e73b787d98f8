import pytest

from schemas.records import Candidate, Request, Turn
from streams.text import tokens
from streams.text.prompt import count_sections


def request(**kw):
    base = dict(
        request_id="r1",
        tenant="acme",
        service="search",
        decision_type="ranking",
        state={"query": "red shoes", "locale": "en-US"},
        history=[Turn(role="user", content="show me shoes"), Turn(role="assistant", content="here are some")],
        candidates=[Candidate(id="a", text="red running shoes"), Candidate(id="b", text="blue sandals")],
    )
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


@pytest.fixture(scope="module")
def arena_lines(shared_data) -> list[str]:
    """Real chat text (arena-hard answers), one line each, blank ones dropped."""
    import json

    lines = []
    for line in (shared_data / "arena-hard" / "answers-gpt-3.5-turbo-0125.jsonl").read_text().splitlines():
        lines += json.loads(line)["choices"][0]["turns"][0]["content"].splitlines()
    return [line for line in lines if line][:3000]


@pytest.mark.parametrize("model", ["gpt-4o", "gpt-3.5-turbo", "all-MiniLM-L6-v2"])
def test_the_measured_context_counts_exactly_what_is_rendered_at_every_truncation(model, arena_lines):
    import random

    from streams.text.prompt import measure_context

    rng = random.Random(7)
    texts = arena_lines
    for _ in range(60):
        turns = [
            Turn(role=rng.choice(["user", "assistant"]), content=rng.choice(texts) + rng.choice(["", " ", "?", "\n"]))
            for _ in range(rng.randint(0, 8))
        ]
        state = rng.choice([rng.choice(texts), {"query": rng.choice(texts)}])
        measured = measure_context(request(history=turns, state=state), model)
        for first in range(len(turns) + 1):
            assert measured.tokens(first) == tokens.count(measured.text(first), model)
