from pathlib import Path

import pytest

from streams.cache.calibration import read_pairs
from streams.cache.verify import verify

QUESTION_PAIRS = Path(__file__).with_name("question_pairs.jsonl")


@pytest.mark.parametrize("a,b,reason", [
    ("How do I gain weight?", "How do I lose weight?", "antonym"),
    ("What happened in 2015?", "What happened in 2016?", "number"),
    ("What are the positive effects of caffeine?", "What are the negative effects of caffeine?", "antonym"),
    ("Why do I have acne?", "Why do I not have acne?", "negation"),
    ("Why don't I have friends?", "Why do I have friends?", "negation"),
    ("What caused the First World War?", "What caused the Second World War?", "ordinal"),
    ("Who won the 1st round?", "Who won the 2nd round?", "ordinal"),
    ("Why do Poles dislike Russians?", "Why do Russians dislike Poles?", "swapped_roles"),
    ("How do I convert PDF to Word?", "How do I convert Word to PDF?", "swapped_roles"),
    ("Is an MBA worth it?", "Is an MBA in IT worth it?", "narrower_scope"),
    ("How do I become a data scientist?", "How do I become a data scientist in India?", "narrower_scope"),
    ("What is the capital of France?", "What is the capital of Germany?", "key_term"),
    ("The gate is blue.", "The gate is yellow.", "antonym"),
    ("How many calories are in one banana?", "How many calories are in two bananas?", "number"),
    ("如何在2015年减肥", "如何在2016年减肥", "number"),
])
def test_near_misses_are_refused_with_their_reason(a, b, reason):
    assert verify(a, b).reason == reason
    assert not verify(b, a).ok


@pytest.mark.parametrize("a,b", [
    ("How can I lose weight fast?", "What is the fastest way to lose weight?"),
    ("What is the difference between a virus and bacteria?", "What is the difference between bacteria and a virus?"),
    ("Which is the best laptop under 50000?", "What is the best laptop under 50,000?"),
    ("Why don't I have friends?", "Why do I have no friends?"),
    ("A woman peels a potato.", "A woman is peeling a potato."),
    ("How do I learn Python?", "How do I learn Python quickly?"),
    ("如何减肥", "怎样减肥"),
])
def test_paraphrases_pass(a, b):
    assert verify(a, b).ok and verify(b, a).ok


def test_hand_labeled_question_pairs():
    pairs = read_pairs(QUESTION_PAIRS)
    negatives = [p for p in pairs if p.label == 0]
    positives = [p for p in pairs if p.label == 1]
    assert [p for p in negatives if verify(p.text_a, p.text_b).ok] == []
    passed = sum(verify(p.text_a, p.text_b).ok for p in positives)
    assert passed >= 0.9 * len(positives)
