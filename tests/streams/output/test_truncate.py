"""Token-exact truncation: never above the limit, cut at a sentence end, marked, code fences closed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams import settings as settings_mod
from streams.output.clean import FENCE, clean
from streams.output.truncate import truncate
from streams.text import tokens

TEXT = (
    "The cache is cold after a deploy. Warm it with the top queries first. Then open traffic slowly.\n\n"
    "```python\nfor q in top_queries:\n    cache.get(q)\n```\n\nThat is all it takes."
)
CHINESE = "缓存在部署后是冷的。先用最热门的查询预热。然后逐步放开流量。这样就不会出现雪崩。"


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4o"])
@pytest.mark.parametrize("text", [TEXT, CHINESE])
def test_never_exceeds_the_limit_and_marks_the_cut(model, text):
    total = tokens.count(text, model)
    for limit in range(0, total + 3):
        out, cut = truncate(text, limit, model)
        assert tokens.count(out, model) <= limit
        assert cut == (limit < total)
        if not cut:
            assert out == text
        elif tokens.count("[…]", model) + 1 < limit:
            assert out.endswith("[…]")
            assert "\ufffd" not in out  # no half of a multi-byte character


@pytest.mark.parametrize(
    "limit, expected",
    [
        (12, "The cache is cold after a deploy. […]"),
        (22, "The cache is cold after a deploy. Warm it with the top queries first. Then open traffic slowly. […]"),
    ],
)
def test_cuts_at_a_sentence_end(limit, expected):
    assert truncate(TEXT, limit, "gpt-4o") == (expected, True)


def test_closes_a_code_fence_it_cuts_into():
    limit = tokens.count(TEXT.split("    cache.get")[0], "gpt-4o") + 4
    out, cut = truncate(TEXT, limit, "gpt-4o")
    assert cut and out.endswith("for q in top_queries:\n```\n[…]")
    assert [m.group("body") for m in FENCE.finditer(out)] == ["for q in top_queries:"]


def test_clean_applies_max_tokens_after_cleanup():
    c = clean("Sure! " + TEXT + "\n\nI hope this helps!", model="gpt-4o", max_tokens=22)
    assert c.truncated and c.tokens_after == tokens.count(c.text, "gpt-4o") <= 22
    assert c.text.startswith("The cache is cold") and c.removed == ["preamble", "closer"]


def test_real_answers_with_code_stay_within_limits():
    path = Path(settings_mod.load().shared_data) / "arena-hard" / "answers-gpt-4-0314.jsonl"
    if not path.exists():
        pytest.skip(f"Arena-Hard answers not found at {path}; set JEV_SHARED_DATA to the shared data folder")
    with open(path, "rb") as f:
        answers = [orjson.loads(line)["choices"][0]["turns"][0]["content"] for line in f]
    with_code = [a for a in answers if "```" in a][:40]
    for answer in with_code:
        for limit in (50, 200):
            c = clean(answer, model="gpt-4", max_tokens=limit)
            assert c.tokens_after == tokens.count(c.text, "gpt-4") <= limit
            assert c.text.count("```") % 2 == 0  # every fence it opened is closed


def test_cuts_derived_from_the_one_encoding_are_exact_after_a_rewritten_opening():
    """Answers whose preamble lost its filler words (opening rewritten): counts and cuts still token-exact."""
    path = Path(settings_mod.load().shared_data) / "arena-hard" / "answers-gpt-3.5-turbo-0125.jsonl"
    if not path.exists():
        pytest.skip(f"Arena-Hard answers not found at {path}; set JEV_SHARED_DATA to the shared data folder")
    with open(path, "rb") as f:
        answers = [orjson.loads(line)["choices"][0]["turns"][0]["content"] for line in f]
    rewritten = [a for a in answers[:200] if clean(a, model="gpt-3.5-turbo").text not in a]
    assert len(rewritten) >= 20
    for answer in rewritten:
        for limit in (None, 60, 300):
            c = clean(answer, model="gpt-3.5-turbo", max_tokens=limit)
            assert c.tokens_after == tokens.count(c.text, "gpt-3.5-turbo") <= (limit or c.tokens_before)
