"""Two counts of a model call: Jev's reserves, the server's settles (totals, cost, usage rows with their source)."""

import pytest

from schemas.records import Request
from streams.models import pricing
from streams.models.protocol import Scored, Usage
from streams.scoring.ledger import Ledger

REQUEST = Request(request_id="r1", tenant="t", service="s", decision_type="ranking", state="退款 refund")


@pytest.fixture(autouse=True)
def price():
    pricing.register("ledger-test-model", 1.0, 0.5, 2.0)


def test_the_servers_count_settles_totals_and_cost_and_both_are_kept():
    ledger = Ledger()
    ledger.add("fine", 120, "ledger-test-model", Scored([0.1], 100, 0, 1, Usage(110, 1, 64), calls=1))
    input_tokens, cached, output, cost = ledger.totals()
    assert (input_tokens, cached, output) == (110, 64, 1)
    assert cost == pytest.approx(pricing.cost("ledger-test-model", 110, 64, 1))
    [event] = ledger.events(REQUEST, 5.0, "ok", 1)
    assert (event.input_tokens, event.server_input_tokens, event.server_cache_read_tokens) == (100, 110, 64)
    assert event.count_source == "server" and event.cost == pytest.approx(cost)


def test_a_call_without_usage_is_settled_on_jevs_count_and_says_so():
    ledger = Ledger()
    ledger.add("fine", 0, "ledger-test-model", Scored([0.1], 100, 0, 1, Usage(110, 1, 0), calls=1))
    ledger.add("fine", 0, "ledger-test-model", Scored([0.2], 50, 0, 1, None, calls=1))
    [event] = ledger.events(REQUEST, 5.0, "ok", 1)
    assert event.count_source == "mixed" and event.server_input_tokens == 160 and event.input_tokens == 150


def test_a_server_that_reports_no_usage_is_settled_on_jevs_count_and_says_so():
    ledger = Ledger()
    ledger.add("stream", 0, "ledger-test-model", Scored([], 30, 0, 12, None, calls=1))
    [event] = ledger.events(REQUEST, 5.0, "ok", 1)
    assert event.count_source == "missing" and (event.server_input_tokens, event.server_output_tokens) == (30, 12)


def test_in_process_models_have_only_jevs_count():
    ledger = Ledger()
    ledger.add("fine", 0, "ledger-test-model", Scored([0.1], 100, 10, 0))
    [event] = ledger.events(REQUEST, 5.0, "ok", 1)
    assert event.count_source == "jev" and event.server_input_tokens == 0
    assert event.cost == pytest.approx(pricing.cost("ledger-test-model", 100, 10, 0))
