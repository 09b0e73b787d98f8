"""Rule tagger (English and Chinese) and reference detection of the last user turn."""

import pytest

from streams.distill.tagger import references, tag_turn


@pytest.mark.parametrize(
    "role,content,tag",
    [
        ("user", "hi!", "chit-chat"),
        ("user", "Thanks a lot!", "chit-chat"),
        ("user", "谢谢！", "chit-chat"),
        ("user", "This is ridiculous, I am so frustrated", "venting"),
        ("user", "气死我了，太差了", "venting"),
        ("user", "My order number is 558812 and it never arrived.", "information"),
        ("user", "补充一下：订单号是 A77，地址在上海", "information"),
        ("user", "Here is the stack trace from the server", "information"),
        ("user", "How do I reverse a list in Python?", "resolved"),
        ("user", "请问怎么退货", "resolved"),
        ("assistant", "I hope this helps! Let me know if you have other questions.", "boilerplate"),
        ("assistant", "不客气，还有什么可以帮您？", "boilerplate"),
        ("assistant", "Use list.reverse() or slicing with [::-1].", "other"),
        ("system", "You are a helpful assistant.", "system"),
        ("user", "Why is this so frustrating? What is wrong with the build?", "resolved"),
    ],
)
def test_tag_turn(role, content, tag):
    assert tag_turn(role, content) == tag


def _conv(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


@pytest.mark.parametrize(
    "messages,expected",
    [
        (_conv(("user", "write a poem"), ("assistant", "Roses are red"), ("user", "make it shorter")), {1}),
        (_conv(("user", "write a poem"), ("assistant", "Roses are red"), ("user", "继续")), {1}),
        (_conv(("user", "write a poem"), ("assistant", "Roses are red"), ("user", "Why?")), {1}),
        (_conv(("user", "write a poem"), ("assistant", "Roses are red"), ("user", "Explain DNS.")), set()),
        (
            _conv(
                ("user", "write a poem"),
                ("assistant", "Roses are red"),
                ("user", "Now explain quantum computing to a child in simple words"),
            ),
            set(),
        ),
        (
            _conv(
                ("user", "q1"),
                ("assistant", "a1"),
                ("user", "q2"),
                ("assistant", "a2"),
                ("user", "Go back to your first answer please."),
            ),
            {0, 1},
        ),
        (
            _conv(
                ("user", "q1"),
                ("assistant", "The deployment uses three replicas behind a load balancer."),
                ("user", "q2"),
                ("assistant", "a2"),
                ("user", "About 'The deployment uses three replicas behind a load balancer.' is three enough?"),
            ),
            {1},
        ),
        (
            _conv(
                ("user", "q1"),
                ("assistant", "a1"),
                ("user", "q2"),
                ("assistant", "a2"),
                ("user", "Regarding [S-20240512-001]: please give details"),
            ),
            {1},
        ),
    ],
)
def test_references(messages, expected):
    assert references(messages, len(messages) - 1) == expected
