"""The generator router: channel by difficulty, deadline and budget; the validator escalates a low-confidence
answer to the next channel and both calls are metered."""

import time
from dataclasses import dataclass

import pytest

from schemas.records import Request, Work
from streams.models.protocol import Generated, ModelUnavailable
from streams.models.router import Router
from streams.scoring.generate import generated_decision
from streams.scoring.policy import Policy


@dataclass
class Fixed:
    name: str
    confidence: float | None = 0.9
    down: bool = False
    model: str = ""
    label: str = "llm"
    calls: int = 0

    def generate(self, prompt, max_tokens):
        self.calls += 1
        if self.down:
            raise ModelUnavailable("down")
        return Generated(f"{self.name} answer", 10, 5, self.name, "llm", confidence=self.confidence)


def work(context_tokens=50, deadline_ms=0, tier_cap="", question_type="", state="退货怎么办? how do I return it?"):
    req = Request(
        request_id="g1",
        tenant="t",
        service="s",
        decision_type="customer_service",
        state=state,
        kind="generate",
        deadline_ms=deadline_ms,
        question_type=question_type,
    )
    return Work(
        request=req,
        admitted_at=time.time(),
        model="gpt-4o-mini",
        context=str(state),
        context_tokens=context_tokens,
        tier_cap=tier_cap,
    )


def router(**conf):
    return Router(
        {
            "fast": Fixed("fast", conf.get("fast", 0.9)),
            "balanced": Fixed("balanced"),
            "precise": Fixed("precise", conf.get("precise", 0.95), conf.get("down", False)),
        }
    )


@pytest.mark.parametrize(
    "kwargs, channel",
    [
        ({}, "fast"),
        ({"context_tokens": 800}, "balanced"),
        ({"context_tokens": 3000}, "precise"),
        ({"question_type": "creative"}, "balanced"),
        ({"context_tokens": 3000, "deadline_ms": 300}, "fast"),
        ({"context_tokens": 3000, "tier_cap": "coarse"}, "fast"),
    ],
)
def test_the_channel_follows_difficulty_deadline_and_budget(kwargs, channel):
    assert router().route(work(**kwargs)) == channel


def test_a_missing_channel_takes_the_nearest_above_else_below():
    r = Router({"fast": Fixed("f"), "precise": Fixed("p")})
    assert r.route(work(context_tokens=800)) == "precise"
    assert Router({"fast": Fixed("f")}).route(work(context_tokens=3000)) == "fast"


def test_a_low_confidence_answer_escalates_and_both_calls_are_metered():
    r = router(fast=0.2)
    decision, events = generated_decision(r, work(), time.perf_counter(), Policy(escalate_below=0.5))
    assert decision.text == "balanced answer" and decision.chain[1] == "validate:0.200<0.5"
    assert {e.stack.rsplit(";", 1)[-1] for e in events} == {"generate", "escalation"}
    assert decision.input_tokens == 20 and decision.output_tokens == 10


def test_a_confident_answer_or_a_degraded_request_does_not_escalate():
    r = router(fast=0.2)
    decision, _ = generated_decision(r, work(tier_cap="coarse"), time.perf_counter(), Policy(escalate_below=0.5))
    assert decision.text == "fast answer" and r.channels["balanced"].calls == 0
    decision, _ = generated_decision(router(), work(), time.perf_counter(), Policy(escalate_below=0.5))
    assert len(decision.chain) == 1


def test_an_escalation_that_fails_keeps_the_first_answer():
    r = Router({"fast": Fixed("fast", 0.1), "precise": Fixed("precise", down=True)})
    decision, _ = generated_decision(r, work(), time.perf_counter(), Policy(escalate_below=0.5))
    assert decision.text == "fast answer" and decision.chain[-1] == "escalation:precise:model_unavailable"
