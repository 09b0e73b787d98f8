import pytest

from streams.cache.predictive import FollowupModel, plan


def trained() -> FollowupModel:
    model = FollowupModel()
    for session in range(10):
        model.observe(f"s{session}", "What is my balance?")
        model.observe(f"s{session}", "How do I transfer money?" if session < 7 else "Where is my card?")
    return model


def test_likely_next_is_learned_per_session():
    model = trained()
    assert model.likely_next("what is my  balance?", 2) == [
        ("How do I transfer money?", 0.7),
        ("Where is my card?", pytest.approx(0.3)),
    ]
    assert model.likely_next("How do I transfer money?") == []  # sessions ended there


def test_sessions_do_not_mix():
    model = FollowupModel()
    model.observe("a", "q1")
    model.observe("b", "q2")
    model.observe("a", "q3")
    assert model.likely_next("q1") == [("q3", 1.0)]
    assert model.likely_next("q2") == []


@pytest.mark.parametrize(
    "budget,expected",
    [
        (1000, ["How do I transfer money?", "Where is my card?"]),
        (150, ["How do I transfer money?"]),
        (50, []),
    ],
)
def test_plan_fits_the_token_budget(budget, expected):
    chosen = plan(trained(), "What is my balance?", budget, cost=lambda q: 100, min_probability=0.2)
    assert [c.question for c in chosen] == expected
    assert sum(c.tokens for c in chosen) <= budget


def test_plan_skips_cached_and_unlikely():
    model = trained()
    assert plan(model, "What is my balance?", 1000, cost=len, cached=lambda q: "transfer" in q) == [
        plan(model, "What is my balance?", 1000, cost=len)[1]
    ]
    assert [c.question for c in plan(model, "What is my balance?", 1000, cost=len, min_probability=0.5)] == [
        "How do I transfer money?"
    ]


def test_bounded_sessions():
    model = FollowupModel(max_sessions=2)
    for s in ("a", "b", "c"):
        model.observe(s, "start")
    assert len(model.last) == 2
