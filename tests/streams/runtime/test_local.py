"""The answer step without a model: a rule match answers with the time it waited since admission as queue_ms."""

import time

from schemas.records import Request, Work
from streams.core.switches import SWITCHES
from streams.runtime.local import answer_locally
from streams.scoring import rules


def screening(request_id: str, risk: float) -> Work:
    request = Request.from_data(
        {
            "request_id": request_id,
            "tenant": "acme",
            "service": "payments",
            "decision_type": "risk_interception",
            "state": {"risk_score": risk, "amount": 900},
            "candidates": [{"id": "block", "text": "block the payment"}, {"id": "allow", "text": "allow the payment"}],
        }
    )
    return Work(
        request=request, admitted_at=time.time() - 1.5, model="gpt-4o-mini", context="", cache_key=f"k-{request_id}"
    )


def test_a_rule_match_reports_its_queueing_since_admission():
    switches = dict.fromkeys(SWITCHES, True) | {"cache.l1": False}
    before = time.time()
    answered = answer_locally(screening("r1", 0.99), switches, cache=None, rules=rules.load())
    assert answered.work.decision.action_id == "block" and answered.work.decision.tier == "rules"
    assert 1500 <= answered.work.decision.queue_ms <= (time.time() - before + 1.5) * 1000
    assert answer_locally(screening("r2", 0.5), switches, cache=None, rules=rules.load()) is None
