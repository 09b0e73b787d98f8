"""finalize(): latency, cleanup of generated answers under the request's contracts, review, usage."""

from __future__ import annotations

from schemas.records import Contracts, Decision, Request, Work
from streams.postprocess.finalize import finalize
from streams.text import tokens

ANSWER = "Sure! Here is the answer:\n\nParis is the capital of France.\n\nI hope this helps!"


def work(text: str = "", *, min_tokens: int = 0, max_tokens: int = 256, action: str = "") -> Work:
    request = Request(
        request_id="r1",
        tenant="acme",
        service="support",
        decision_type="answer",
        state="q",
        kind="generate" if text else "decide",
        contracts=Contracts(max_output_tokens=max_tokens, min_output_tokens=min_tokens),
    )
    return Work(
        request=request,
        admitted_at=100.0,
        model="gpt-4o",
        decision=Decision(request_id="r1", tier="llm" if text else "fine", text=text, action_id=action, chain=["llm"]),
    )


def test_decisions_without_text_are_only_stamped():
    done = finalize(work(action="b"), now=100.25)
    assert done.decision.latency_ms == 250.0 and done.decision.chain == ["llm"]
    assert [e.stage for e in done.usage] == ["postprocess"] and not done.review and done.cacheable


def test_generated_text_is_cleaned_and_savings_metered():
    done = finalize(work(ANSWER), now=100.1)
    assert done.decision.text == "Paris is the capital of France."
    assert done.decision.chain == ["llm", "postprocess:ok"]
    cleanup = next(e for e in done.usage if e.event_id == "4:acme/2:r1:postprocess:cleanup")
    assert cleanup.nominal_tokens == tokens.count(ANSWER, "gpt-4o") - tokens.count(
        "Paris is the capital of France.", "gpt-4o"
    )
    assert cleanup.output_tokens == 0, "cleanup spends no model tokens; the generation stage meters the output"
    assert cleanup.cost == 0.0 and cleanup.outcome == "ok" and cleanup.stack.endswith("postprocess;cleanup")
    assert done.patterns_version and done.cacheable


def test_max_output_tokens_is_enforced():
    done = finalize(work("Paris is the capital of France. " * 50, max_tokens=20), now=100.0)
    assert tokens.count(done.decision.text, "gpt-4o") <= 20 and done.decision.text.endswith("[…]")
    assert done.decision.chain[-1] == "postprocess:truncated"


def test_short_answer_is_retried_through_the_backend():
    asked = []

    def regenerate(instruction: str) -> str:
        asked.append(instruction)
        return "Paris is the capital of France, on the Seine, with about two million inhabitants."

    done = finalize(work("Paris.", min_tokens=8), now=100.0, regenerate=regenerate)
    assert len(asked) == 1 and done.decision.text.startswith("Paris is the capital")
    assert done.decision.chain[-1] == "postprocess:retried_ok"
    retry = next(e for e in done.usage if e.event_id == "4:acme/2:r1:postprocess:retry")
    assert retry.output_tokens == tokens.count(done.decision.text, "gpt-4o") and retry.cost > 0


def test_sensitive_hit_goes_to_review_and_is_never_cached():
    done = finalize(work("The file is marked strictly confidential: do not share."), now=100.0)
    assert done.review and not done.cacheable and done.decision.chain[-1] == "review:sensitive"


def test_switches_turn_cleanup_and_the_review_route_off_but_flagged_text_is_never_cached():
    from schemas.records import Decision, Request, Work

    request = Request(request_id="r9", tenant="t", service="s", decision_type="customer_service", state="q")
    text = "Sure! Here is the key: -----BEGIN RSA PRIVATE KEY----- abc"

    def run(switches):
        work = Work(
            request=request, admitted_at=0.0, model="gpt-4o", decision=Decision(request_id="r9", tier="llm", text=text)
        )
        return finalize(work, now=1.0, switches=switches)

    on = run({})
    assert on.review and not on.cacheable and not on.decision.text.startswith("Sure")
    raw = run({"postprocess.cleanup": False})
    assert raw.review and raw.decision.text == text
    unscanned = run({"postprocess.cleanup": False, "postprocess.scan": False})
    assert not unscanned.review and unscanned.cacheable and unscanned.decision.text == text
    skipped = run({"postprocess.scan": False})
    assert not skipped.review and not skipped.cacheable and "review:skipped" in skipped.decision.chain
