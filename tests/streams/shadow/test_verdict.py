"""Verdicts: served against naive, attribution, and the join of the two halves in either order."""

import pytest

from schemas.records import Candidate, Decision, Request, UsageEvent, Work
from streams.shadow import mechanisms
from streams.shadow.verdict import ShadowJoin, judge, text_similarity


def work(kind="decide", label="", tier="fine", action="a", text="", chain=(), mechs=()) -> Work:
    candidates = [Candidate(id="a", text="x"), Candidate(id="b", text="y")] if kind == "decide" else []
    req = Request(
        request_id="r1",
        tenant="t",
        service="s",
        decision_type="ranking",
        state="q",
        kind=kind,
        candidates=candidates,
        human_decision=label,
    )
    w = Work(request=req, admitted_at=0.0, model="gpt-4o-mini", shadow="served", mechanisms=list(mechs))
    w.decision = Decision(
        request_id="r1", tier=tier, action_id=action, text=text, chain=list(chain), input_tokens=3, nominal_tokens=10
    )
    return w


@pytest.mark.parametrize(
    "a,b,expected",
    [("the cat sat", "the cat sat", 1.0), ("", "", 1.0), ("cat", "dog", 0.0), ("a b c d", "a b", pytest.approx(2 / 3))],
)
def test_text_similarity(a, b, expected):
    assert text_similarity(a, b) == expected


def test_decide_agreement_is_the_action_and_labels_compare_accuracy():
    naive = Decision(request_id="r1", tier="fine", action_id="b", input_tokens=7)
    v = judge(work(action="a"), naive, ["cache.l1"], 0.8)
    assert (v.agreed, v.kept, v.labelled, v.served_tokens, v.naive_tokens) == (False, False, False, 3, 7)
    served_right = judge(work(action="a", label="a"), naive, [], 0.8)  # disagrees, but is the more accurate
    assert (served_right.agreed, served_right.kept, served_right.served_correct) == (False, True, True)
    both_wrong = judge(work(action="a", label="c"), naive, [], 0.8)
    assert both_wrong.kept and not both_wrong.agreed


def test_generate_agreement_is_answer_similarity():
    naive = Decision(request_id="r1", tier="llm", text="Ship the order from Berlin today")
    assert judge(work(kind="generate", text="Ship the order from Berlin today."), naive, [], 0.8).agreed
    assert not judge(work(kind="generate", text="Hold the order"), naive, [], 0.8).agreed


def test_the_join_pairs_either_order_and_feeds_l2_verdicts_to_the_cache():
    learned = []
    join = ShadowJoin(0.8, learn=lambda w, ok: learned.append((w.request.request_id, ok)))
    naive_work = Work(
        request=work().request,
        admitted_at=0.0,
        model="m",
        shadow="naive",
        decision=Decision(request_id="r1", tier="fine", action_id="a"),
    )
    assert join.naive(naive_work) is None
    verdict = join.served(work(tier="cache_l2", chain=["cache_l2", "rules:x"], mechs=["distill.time"]), [])
    assert verdict.agreed and verdict.mechanisms == ["distill.time", "cache.l2"]  # L2: another question's chain
    assert learned == [("r1", True)] and not join.pending
    assert join.served(work(), []) is None and join.naive(naive_work).agreed  # the other order


def test_the_join_is_bounded():
    join = ShadowJoin(0.8, capacity=2)
    for i in range(3):
        w = work()
        w.request = w.request.derive(request_id=f"r{i}")
        join.served(w, [])
    assert len(join.pending) == 2 and join.expired == 1


def test_attribution_from_usage_and_chain():
    def event(stage, section, nominal, actual=0, outcome="ok"):
        return UsageEvent(
            event_id=f"1:t/2:r1:{stage}:{section}",
            request_id="r1",
            ts=0.0,
            tenant="t",
            service="s",
            business_line="",
            session_id="",
            user_id="",
            decision_type="d",
            stage=stage,
            stack="",
            input_tokens=actual,
            nominal_tokens=nominal,
            outcome=outcome,
        )

    events = [
        event("distill", "time", 40),
        event("distill", "provenance", -3),
        event("score", "cascade", 90, 20),
        event("score", "beam", 0),
        event("score", "fine", 50, 50),
        event("score", "fallback", 5, outcome="fallback"),
        event("postprocess", "cleanup", 4),
    ]
    assert mechanisms.from_usage(events) == ["distill.time", "cascade", "breakers", "cleanup"]
    l1 = Decision(request_id="r1", tier="cache_l1", chain=["cache_l1", "coarse:lexical:5/8", "fine:minilm"])
    assert mechanisms.from_decision(l1) == ["cache.l1", "cascade"]
    ruled = Decision(request_id="r1", tier="rules", chain=["rules:block"])
    assert mechanisms.from_decision(ruled) == ["rules"]
    late = Decision(request_id="r1", tier="fallback", chain=["fallback:deadline:policy"])
    assert mechanisms.from_decision(late) == ["breakers"]


@pytest.mark.parametrize(
    "chain,mechs,judged",
    [
        (["cache_l1", "coarse:lexical:5/8", "fine:minilm"], [], ["cascade"]),  # the cascade's decision, replayed
        (["cache_l1", "fine:minilm"], ["distill.time"], ["distill.time"]),
        (["cache_l1", "fine:minilm"], [], ["cache.l1"]),  # nothing else shaped it: a disagreement is the cache's
        (["cache_l1:stale", "coarse:lexical:5/8", "fine:minilm"], [], ["cache.l1", "cascade"]),  # an older version's
    ],
)
def test_an_exact_hit_is_judged_only_for_what_the_cache_itself_could_change(chain, mechs, judged):
    naive_work = Work(
        request=work().request,
        admitted_at=0.0,
        model="m",
        shadow="naive",
        decision=Decision(request_id="r1", tier="fine", action_id="b"),
    )
    join = ShadowJoin(0.8)
    join.naive(naive_work)
    verdict = join.served(work(tier="cache_l1", chain=chain, mechs=mechs), [])
    assert not verdict.agreed and verdict.mechanisms == judged
