"""Sampling, naive twins and the naive engine, on real token counts and the real lexical backend."""
import pytest

from schemas.records import Candidate, Contracts, Request, Turn, UsageEvent, Work
from streams.backends.extractive import ExtractiveGenerator
from streams.ingest.decode import Admission, admit
from streams.scoring import rules as rules_mod
from streams.backends.lexical import LexicalBackend
from streams.scoring.engine import Engine
from streams.shadow.naive import as_shadow, decide_naive, naive_engine
from streams.shadow.sample import Sampler, bucket, parse_rates


def test_rates_per_decision_type():
    assert parse_rates("0.02") == (0.02, {})
    assert parse_rates("0.02, risk_interception=0.5") == (0.02, {"risk_interception": 0.5})
    with pytest.raises(ValueError, match="JEV_SHADOW_RATE"):
        parse_rates("lots")
    with pytest.raises(ValueError, match="within 0..1"):
        parse_rates("2")


def test_sampling_is_a_stable_share():
    ids = [f"r{i}" for i in range(20_000)]
    share = sum(bucket(i) < 0.1 for i in ids) / len(ids)
    assert 0.09 < share < 0.11 and [bucket(i) for i in ids[:5]] == [bucket(i) for i in ids[:5]]


def admitted(turns: int, max_input: int = 8000) -> Work:
    body = Request(request_id="r1", tenant="t", service="s", decision_type="ranking", state="which shoe",
                   history=[Turn(role="user", content=f"turn {i} about running shoes and trail shoes")
                            for i in range(turns)],
                   candidates=[Candidate(id="a", text="trail shoe"), Candidate(id="b", text="road shoe")],
                   contracts=Contracts(max_input_tokens=max_input))
    return admit(body.dumps(), Admission(1 << 20, "gpt-4o-mini", frozenset()))


def test_the_twin_holds_the_whole_history_and_truncation_is_recorded():
    work = admitted(turns=40, max_input=120)
    twins, skipped = Sampler("1").take([work])
    twin = twins["t", "r1"]
    assert work.shadow == "served" and twin.shadow == "naive" and not skipped
    assert "turn 0 about" in twin.context and "turn 0 about" not in work.context
    assert twin.context_tokens > work.context_tokens and "truncation" in work.mechanisms
    assert not twin.request.history  # the context carries it


def test_a_streamed_requests_twin_is_answered_whole_and_sends_no_chunks():
    body = Request(request_id="g1", tenant="t", service="s", decision_type="customer_service", kind="generate",
                   stream=True, client="mobile", question_type="creative", state="When do parcels leave?",
                   history=[Turn(role="user", content="Parcels to depot 3 leave within 4 hours.")])
    work = admit(body.dumps(), Admission(1 << 20, "gpt-4o-mini", frozenset()))
    twins, _ = Sampler("1").take([work])
    twin = twins["t", "g1"]
    assert work.request.stream and not twin.request.stream
    engine = Engine(coarse=LexicalBackend(), fine=LexicalBackend(), rules=rules_mod.load(""),
                    generator=ExtractiveGenerator())
    sent = []
    engine.chunk_sink = sent.append  # the worker's sink, set once it streams: a twin must never reach it
    [decided], usage = decide_naive(naive_engine(engine), [twin])
    assert decided.decision.text and decided.decision.output_tokens > 0 and not sent
    assert usage and all(e.stage == "shadow" for e in usage)


def test_pressure_skips_the_sample_and_meters_the_skip():
    twins, skipped = Sampler("1").take([admitted(turns=2)], pressured="load")
    assert not twins and [(e.stage, e.outcome) for e in skipped] == [("shadow", "skipped:load")]
    assert Sampler("0").take([admitted(turns=2)]) == ({}, [])


def test_the_naive_engine_scores_every_candidate_with_the_top_tier_and_no_rules():
    engine = Engine(coarse=LexicalBackend(), fine=LexicalBackend(), rules=rules_mod.load(""))
    naive = naive_engine(engine)
    assert naive.mode == "fine-only" and naive.rules == [] and not naive.switches["score.rules"]
    assert naive.config.policy("risk_interception").timeout_ms > 1e9 and engine.config.policy(
        "risk_interception").timeout_ms == 300
    work = admitted(turns=2)
    twins, _ = Sampler("1").take([work])
    twins["t", "r1"].cache_key = "k"
    decided, usage = decide_naive(naive, [twins["t", "r1"]])
    assert decided[0].decision.action_id in ("a", "b") and decided[0].decision.tier == "fine"
    assert usage and all(e.stage == "shadow" and e.nominal_tokens == 0 and ";shadow" in e.stack for e in usage)
    assert "1:t/2:r1:shadow:fine" in {e.event_id for e in usage}  # lexical spends no model tokens; the row is metered


def test_as_shadow_restages_an_event():
    event = UsageEvent(event_id="1:t/2:r1:score:fine", request_id="r1", ts=0.0, tenant="t", service="s",
                       business_line="", session_id="", user_id="", decision_type="d", stage="score", stack="t;s;d;score;fine",
                       input_tokens=5, nominal_tokens=9)
    shadow = as_shadow(event)
    assert (shadow.event_id, shadow.stage, shadow.stack, shadow.nominal_tokens, shadow.input_tokens) == (
        "1:t/2:r1:shadow:fine", "shadow", "t;s;d;shadow;fine", 0, 5)
