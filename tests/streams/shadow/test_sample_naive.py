"""Sampling, naive twins and the naive engine, on real token counts and the real lexical backend."""

import pytest
import yaml

from schemas.records import Candidate, Contracts, Request, Turn, UsageEvent, Work
from streams.ingest.decode import Admission, admit
from streams.models.extractive import ExtractiveGenerator
from streams.models.lexical import LexicalBackend
from streams.output import chunks as stream_mod
from streams.scoring import rules as rules_mod
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
    body = Request(
        request_id="r1",
        tenant="t",
        service="s",
        decision_type="ranking",
        state="which shoe",
        history=[Turn(role="user", content=f"turn {i} about running shoes and trail shoes") for i in range(turns)],
        candidates=[Candidate(id="a", text="trail shoe"), Candidate(id="b", text="road shoe")],
        contracts=Contracts(max_input_tokens=max_input),
    )
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
    body = Request(
        request_id="g1",
        tenant="t",
        service="s",
        decision_type="customer_service",
        kind="generate",
        stream=True,
        client="mobile",
        question_type="creative",
        state="When do parcels leave?",
        history=[Turn(role="user", content="Parcels to depot 3 leave within 4 hours.")],
    )
    work = admit(body.dumps(), Admission(1 << 20, "gpt-4o-mini", frozenset()))
    twins, _ = Sampler("1").take([work])
    twin = twins["t", "g1"]
    assert work.request.stream and not twin.request.stream
    engine = Engine(
        coarse=LexicalBackend(), fine=LexicalBackend(), rules=rules_mod.load(""), generator=ExtractiveGenerator()
    )
    sent = []
    engine.chunk_sink = sent.append  # the worker's sink, set once it streams: a twin must never reach it
    [decided], usage = decide_naive(naive_engine(engine), [twin])
    assert decided.decision.text and decided.decision.output_tokens > 0 and not sent
    assert usage and all(e.stage == "shadow" for e in usage)


def cut_stream_config(tmp_path, length: int):
    """The bundled stream lengths cut to `length` tokens, as `jev demo --model-url` cuts them."""
    raw = yaml.safe_load(stream_mod.BUNDLED.read_text(encoding="utf-8"))
    for spec in raw["types"].values():
        spec["max_output_tokens"] = min(spec["max_output_tokens"], length)
    (tmp_path / "stream.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return stream_mod.load(str(tmp_path / "stream.yaml"))


class Recording(ExtractiveGenerator):
    """The extractive generator, keeping the output limit of every call."""

    def __init__(self):
        super().__init__()
        self.asked: list[int] = []

    def generate(self, prompt: str, max_tokens: int):
        self.asked.append(max_tokens)
        return super().generate(prompt, max_tokens)


@pytest.mark.parametrize(
    "question, fact",
    [
        ("When do parcels leave the Lyon hub?", "Parcel {i} for depot {d} leaves the Lyon hub within {i} hours."),
        ("包裹什么时候离开里昂中转站？", "第{i}号包裹在{i}小时内离开里昂中转站，发往{d}号仓库。"),
    ],
)
def test_a_streamed_answers_twin_asks_for_no_more_output_than_the_served_answer(tmp_path, question, fact):
    config = cut_stream_config(tmp_path, 64)
    facts = "\n".join(fact.format(i=i, d=i % 5) for i in range(80))
    body = Request(
        request_id="g2",
        tenant="t",
        service="support",
        decision_type="customer_service",
        kind="generate",
        stream=True,
        state=f"{question}\n{facts}",
        contracts=Contracts(max_output_tokens=512),
    )
    work = admit(body.dumps(), Admission(1 << 20, "gpt-4o-mini", frozenset(), stream_config=config))
    twin = Sampler("1", config).take([work])[0]["t", "g2"]
    assert work.request.contracts.max_output_tokens == 512 and config.plan(work.request).length == 64
    assert twin.request.contracts.max_output_tokens == 64 and not twin.request.stream
    generator = Recording()
    engine = Engine(coarse=LexicalBackend(), fine=LexicalBackend(), rules=rules_mod.load(""), generator=generator)
    [decided], _ = decide_naive(naive_engine(engine), [twin])
    assert generator.asked == [64]  # the served stream's length, not the contract's 512
    assert 0 < decided.decision.output_tokens <= 64


def test_a_whole_answers_twin_keeps_its_contracts_output_limit():
    body = Request(
        request_id="g3",
        tenant="t",
        service="support",
        decision_type="customer_service",
        kind="generate",
        state="When do parcels leave?",
        contracts=Contracts(max_output_tokens=300),
    )
    twin = Sampler("1").take([admit(body.dumps(), Admission(1 << 20, "gpt-4o-mini", frozenset()))])[0]["t", "g3"]
    assert twin.request.contracts.max_output_tokens == 300


def test_pressure_skips_the_sample_and_meters_the_skip():
    twins, skipped = Sampler("1").take([admitted(turns=2)], pressured="load")
    assert not twins and [(e.stage, e.outcome) for e in skipped] == [("shadow", "skipped:load")]
    assert Sampler("0").take([admitted(turns=2)]) == ({}, [])


def test_the_naive_engine_scores_every_candidate_with_the_top_tier_and_no_rules():
    engine = Engine(coarse=LexicalBackend(), fine=LexicalBackend(), rules=rules_mod.load(""))
    naive = naive_engine(engine)
    assert naive.mode == "fine-only" and naive.rules == [] and not naive.switches["score.rules"]
    assert (
        naive.config.policy("risk_interception").timeout_ms > 1e9
        and engine.config.policy("risk_interception").timeout_ms == 300
    )
    work = admitted(turns=2)
    twins, _ = Sampler("1").take([work])
    twins["t", "r1"].cache_key = "k"
    decided, usage = decide_naive(naive, [twins["t", "r1"]])
    assert decided[0].decision.action_id in ("a", "b") and decided[0].decision.tier == "fine"
    assert usage and all(e.stage == "shadow" and e.nominal_tokens == 0 and ";shadow" in e.stack for e in usage)
    assert "1:t/2:r1:shadow:fine" in {e.event_id for e in usage}  # lexical spends no model tokens; the row is metered


def test_as_shadow_restages_an_event():
    event = UsageEvent(
        event_id="1:t/2:r1:score:fine",
        request_id="r1",
        ts=0.0,
        tenant="t",
        service="s",
        business_line="",
        session_id="",
        user_id="",
        decision_type="d",
        stage="score",
        stack="t;s;d;score;fine",
        input_tokens=5,
        nominal_tokens=9,
    )
    shadow = as_shadow(event)
    assert (shadow.event_id, shadow.stage, shadow.stack, shadow.nominal_tokens, shadow.input_tokens) == (
        "1:t/2:r1:shadow:fine",
        "shadow",
        "t;s;d;shadow;fine",
        0,
        5,
    )
