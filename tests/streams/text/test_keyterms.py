"""Key terms in English and Chinese: identifiers, numbers, quoted terms, Latin names in CJK text, CJK places."""

import pytest

from streams.cache.guards import verify
from streams.text.keyterms import differ, key_terms, missing


@pytest.mark.parametrize(
    "text, terms",
    [
        ("Where is order INV-0004?", {"inv-0004"}),
        ("Is the A320 quieter than the 737?", {"a320", "#737"}),
        ('What does "serendipity" mean?', {"serendipity"}),
        ("How much is a ticket for three adults?", {"#3"}),
        ("订单A320还没发货", {"a320"}),  # Han is no word boundary: the identifier is still found, its digits no number
        ("我想看《三体》的电影版", {"三体"}),
        ("请问「双十一」什么时候开始", {"双十一", "#11"}),
        ("帮我订北京饭店住三晚", {"北京饭店", "#3"}),
        ("我在霞云岭国家森林公园附近", {"森林公园"}),
        ("iPhone 15的价格是多少", {"iphone", "#15"}),
        ("我的包裹3天了还没到", {"#3"}),
        ("怎么申请退款", set()),
    ],
)
def test_key_terms_of_english_and_chinese(text, terms):
    assert key_terms(text) == terms


@pytest.mark.parametrize(
    "a, b, reason",
    [
        ("Where is order INV-0004?", "Where is order INV-0005?", "number"),  # the number check sees the digits first
        ("Where is order INV-0004?", "Where is order ABC-0004?", "key_term"),
        ('What does "serendipity" mean?', 'What does "ephemeral" mean?', "key_term"),
        ("订单A320什么时候发货", "订单B320什么时候发货", "key_term"),
        ("《三体》好看吗", "《流浪地球》好看吗", "key_term"),
        ("帮我订北京饭店住三晚", "帮我订上海饭店住三晚", "key_term"),
        ("iPhone怎么截图", "安卓手机怎么截图", "key_term"),
        ("「双十一」有什么优惠", "「黑色星期五」有什么优惠", "number"),
    ],
)
def test_a_term_one_side_lacks_is_a_difference_and_the_cache_refuses_it(a, b, reason):
    assert differ(a, b) and differ(b, a)
    assert verify(a, b).reason == reason and not verify(b, a).ok


@pytest.mark.parametrize(
    "a, b",
    [
        ("Where is order INV-0004?", "Can you tell me where order INV-0004 is?"),
        ("住3晚多少钱", "住三晚多少钱"),  # one number in digits or numerals
        ("北京饭店有空房吗", "我想订北京饭店，还有房间吗"),  # the same hotel named inside a longer phrase
        ("《三体》好看吗", "三体这本书好看吗"),  # the title written without its brackets
        ("怎么申请退款", "如何办理退款"),
        ("iPhone怎么截图", "iphone如何截屏"),
    ],
)
def test_rewording_that_keeps_the_terms_is_no_difference(a, b):
    assert not differ(a, b)
    assert verify(a, b).reason != "key_term"


def test_missing_names_the_terms_of_one_side():
    assert missing("订单A320和《三体》", "订单A320") == {"三体"}
    assert missing("订单A320", "订单A320和《三体》") == set()
