from streams.distill.constraints import constraint_turns, constraints
from streams.distill.core import distill
from streams.distill.policy import load_policy


def test_constraints_in_chinese_and_english():
    assert constraints("帮我找个免费的景点，我要五一的时候去玩3天。") == {"#51", "#3"}
    assert constraints("霞云岭国家森林公园的附近还有什么景点吗") == {"霞云岭国家森林公园"}
    assert constraints("听过《无与伦比的美丽》吗？") == {"《无与伦比的美丽》"}
    assert constraints("它家是什么类型的酒店呀？") == set()  # a generic 酒店 names no place
    assert {"London", "7:30", "#2"} <= constraints("Book a table for two in London at 7:30")
    assert constraints("好的，谢谢你！") == constraints("thanks!") == set()
    assert constraints("数字 3 " * 100) == set()  # pasted material states no constraint


def test_a_constraint_restated_later_needs_no_earlier_turn():
    messages = [
        {"role": "user", "content": "订北京饭店，住三晚"},
        {"role": "assistant", "content": "好的"},
        {"role": "user", "content": "还是住三晚吧"},
        {"role": "assistant", "content": "好的"},
        {"role": "user", "content": "谢谢"},
    ]
    assert constraint_turns(messages) == {0, 2}
    messages[2]["content"] = "北京饭店住三晚"
    assert constraint_turns(messages) == {2}


def test_the_semantic_layer_keeps_every_stated_constraint():
    turns = [
        "你好，帮我找一家评分4.5分以上的餐馆。",
        "外婆家和海底捞都不错。",
        "海底捞好吃吗？",
        "很受欢迎。",
        "附近有景点吗？",
        "有故宫。",
        "故宫好玩吗？",
        "值得一去。",
        "那里人多吗？",
        "周末人很多。",
        "需要提前预约吗？",
        "需要在网上预约。",
        "那就这样吧，帮我总结一下。",
    ]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)]
    out = distill(messages, model="gpt-4o-mini", budget=0, policy=load_policy("default"), switches={}, now=0.0)
    assert 0 in out.kept  # 4.5分: no later turn says it again
    assert 12 in out.kept and out.tokens_after < out.tokens_before  # the other answered questions fold
