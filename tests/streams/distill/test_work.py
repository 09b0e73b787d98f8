"""distill_work(): context from the kept history, exact context tokens, one UsageEvent per saving layer."""

import pytest

from schemas.records import Candidate, Contracts, Request, Turn, Work
from streams.distill.policy import load_policy
from streams.distill.work import distill_work
from streams.text import tokens
from streams.text.prompt import render_context

NOW = 1_715_500_000.0
MODEL = "gpt-4o-mini"


def make_work(history, candidates=3, max_input_tokens=8000):
    request = Request(
        request_id="r1",
        tenant="acme",
        service="support",
        decision_type="customer_service",
        state={"order": "558812"},
        history=[Turn(**t) for t in history],
        candidates=[Candidate(id=str(i), text=f"action {i}") for i in range(candidates)],
        contracts=Contracts(max_input_tokens=max_input_tokens),
    )
    return Work(request=request, admitted_at=NOW, model=MODEL, sections={"state": 10, "candidates": 6})


HISTORY = [
    {"role": "user", "content": "Hello!", "ts": NOW - 7200},
    {"role": "assistant", "content": "Hi! How can I help?", "ts": NOW - 7100},
    {"role": "user", "content": "This is terrible, I am so angry!! " * 8, "ts": NOW - 3600},
    {"role": "assistant", "content": "I am sorry about that, I understand the frustration. " * 6, "ts": NOW - 3500},
    {"role": "user", "content": "Where is order 558812 now?", "ts": NOW - 60},
]


@pytest.mark.parametrize("candidates", [0, 1, 3])
def test_context_and_usage_events(candidates):
    work = make_work(HISTORY, candidates)
    out, events = distill_work(work, load_policy("customer_service"), {}, NOW)
    assert out is not work and work.context == ""
    assert out.context.endswith('State: {"order":"558812"}')
    assert "[S-20240512-004] user: Where is order 558812 now?" in out.context
    assert "folded: small talk, user expressed frustration — recorded]" in out.context
    assert out.context_tokens == tokens.count(out.context, MODEL)
    assert out.context_tokens < tokens.count(render_context(work.request), MODEL)
    assert out.dropped_turns == [
        "0:semantic:chit-chat",
        "1:semantic:chit-chat",
        "2:semantic:venting",
        "3:semantic:venting",
    ]
    assert [e.stack for e in events] == ["acme;support;customer_service;distill;semantic"]
    event = events[0]
    assert event.event_id == "4:acme/2:r1:distill:semantic" and event.input_tokens == 0
    saved = sum(tokens.count(f"{t['role']}: {t['content']}", MODEL) for t in HISTORY[:4]) - tokens.count(
        out.context.splitlines()[0], MODEL
    )
    assert event.nominal_tokens == saved * max(1, candidates)


def test_kill_switch_passes_ingests_context_through():
    """Off, the context is what ingest rendered and counted: its template text and contract truncation stay."""
    work = make_work(HISTORY)
    work.context = f"Answer briefly.\n\n{render_context(work.request, ['user: Where is order 558812 now?'])}"
    work.context_tokens = tokens.count(work.context, MODEL)
    out, events = distill_work(work, load_policy("customer_service"), {"distill": False}, NOW)
    assert (out.context, out.context_tokens, events) == (work.context, work.context_tokens, [])


def test_contract_tightens_the_budget():
    long_history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Topic {i}: " + "detail " * 80} for i in range(10)
    ] + [{"role": "user", "content": "What should I do next?"}]
    loose, _ = distill_work(make_work(long_history), load_policy("customer_service"), {}, NOW)
    tight, events = distill_work(
        make_work(long_history, max_input_tokens=200), load_policy("customer_service"), {}, NOW
    )
    assert tight.context_tokens < loose.context_tokens
    assert any(e.event_id.endswith(":time") for e in events)


def test_the_guard_raises_every_history_budget_through_a_tune_control():
    from schemas.records import Control
    from streams.distill.work import Distiller

    distiller = Distiller("")
    configured = distiller.policy_for("customer_service").budget
    distiller.on_control(Control(kind="tune", key="distill.budget_scale", value=1.5))
    assert distiller.policy_for("customer_service").budget == round(configured * 1.5)
    distiller.on_control(Control(kind="tune", key="distill.budget_scale", value=0.2))  # never below configured
    assert distiller.policy_for("customer_service").budget == configured
    distiller.on_control(Control(kind="tune", key="distill.budget_scale", value="lots"))
    assert distiller.scale == 1.0
