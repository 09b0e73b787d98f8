"""The layers as pure functions: domain exclusion (EN/ZH), dedup, TTL selection, exchanges and placeholders."""

import pytest

from streams.distill import dedup, domain, semantic, ttl
from streams.distill.policy import load_policy

EXCLUDE = ("weather", "football", "天气", "彩票")
INCLUDE = ("order", "refund", "订单", "退款")


@pytest.mark.parametrize(
    "text,term",
    [
        ("What will the weather be tomorrow? I love sunny weather.", "weather"),
        ("Did you watch the football match? Football is great.", "football"),
        ("明天天气怎么样？天气预报说有雨吗", "天气"),
        ("我买了彩票，彩票会中奖吗", "彩票"),
        ("My order is late because of the weather; when will my order and refund arrive?", None),  # in-domain wins
        ("订单因为天气延误了，订单什么时候到，能退款吗", None),
        (
            "Please ship my parcel to the office. Deliveries there are fast and the staff can sign for the parcel, "
            "the office is open until six, and the parcel room keeps parcels for a week even in bad weather.",
            None,
        ),
    ],
)
def test_off_domain(text, term):
    contents = ["Where is my parcel?", "It left the warehouse.", text, "Thanks."]
    found = domain.off_domain(contents, [2], EXCLUDE, INCLUDE, top_k=5)
    assert found.get(2) == term


def test_no_exclusion_terms_is_a_no_op():
    assert domain.off_domain(["weather"] * 3, [0, 1], (), INCLUDE, 5) == {}


def test_duplicate_turns_keep_the_latest_and_protected():
    contents = ["same text", "other", "  same text\n", "same text", "other"]
    assert dedup.duplicate_turns(contents, protected={2}) == {0: 3, 1: 4}


def test_repeated_paragraph_kept_in_the_latest_turn_only():
    template = "Follow the company style guide: short sentences, active voice, and no jargon at all please."
    texts = {0: f"{template}\n\nFirst draft.", 2: f"{template}\n\nSecond draft.", 4: f"{template}\n\nThird."}
    changed = dedup.strip_repeated_paragraphs([0, 2, 4], texts, protected={2}, label=lambda i: f"S-{i:03d}")
    assert changed == {0: "[same text as S-004]\n\nFirst draft."}  # the protected turn 2 stays whole


def test_exchanges_group_replies_with_their_question():
    roles = ["system", "assistant", "user", "assistant", "assistant", "user", "user", "assistant"]
    assert semantic.exchanges(roles) == [[0], [1], [2, 3, 4], [5], [6, 7]]


def test_placeholder_counts_exchanges():
    run = [
        ("S-001", "resolved", True),
        ("S-002", "resolved", False),
        ("S-003", "resolved", True),
        ("S-004", "resolved", False),
        ("S-005", "venting", True),
    ]
    assert (
        semantic.placeholder(run)
        == "[S-001..S-005 folded: earlier question answered x2, user expressed frustration — recorded]"
    )


def test_ttl_select_prefers_fresh_then_recent():
    units = [[0], [1], [2], [3]]
    now = 1_000_000.0
    stamps = [now - 10 * 86400, now - 3600, None, now - 100 * 3600]
    dropped = ttl.select(
        units,
        ["other"] * 4,
        [50] * 4,
        stamps,
        protected=set(),
        skip=set(),
        budget=2 * 58,
        reserved=0,
        policy=load_policy("default"),
        now=now,
    )
    assert dropped == {0: "budget", 3: "budget"}  # 1h old and no timestamp (fresh) win


def test_ttl_select_without_budget_only_expires():
    now = 1_000_000.0
    dropped = ttl.select(
        [[0], [1]], ["other"] * 2, [50, 50], [now - 80 * 3600, now], set(), set(), None, 0, load_policy("risk"), now
    )
    assert dropped == {0: "expired"}
