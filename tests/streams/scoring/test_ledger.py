"""Two counts of a model call: Jev's reserves, the server's settles (totals, cost, usage rows with their source)."""

import pytest

from schemas.records import COUNTERS, Request
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


def test_cache_reads_jev_claimed_go_to_state_cache_with_the_servers_cached_tokens():
    ledger = Ledger()
    ledger.add_model_call("fine", 300, "ledger-test-model", Scored([0.1], 100, 64, 1, Usage(104, 1, 60), calls=1), 3)
    fine, cached = ledger.events(REQUEST, 5.0, "ok", 1)
    assert (cached.stack.rsplit(";", 1)[-1], cached.input_tokens, cached.cache_read_tokens, cached.nominal_tokens) == (
        "state_cache",
        64,
        64,
        192,
    )
    assert (cached.server_input_tokens, cached.server_cache_read_tokens, cached.count_source) == (60, 60, "server")
    assert (fine.input_tokens, fine.server_input_tokens, fine.server_cache_read_tokens) == (36, 44, 0)
    # both counts of the call are whole across its rows, and it costs what the unsplit call does
    assert (
        fine.input_tokens + cached.input_tokens == 100 and fine.server_input_tokens + cached.server_input_tokens == 104
    )
    assert fine.cost + cached.cost == pytest.approx(pricing.cost("ledger-test-model", 104, 60, 1))


def test_a_sections_counters_are_its_usage_events_fields_by_the_same_names():
    ledger = Ledger()
    ledger.add("fine", 120, "ledger-test-model", Scored([0.1], 100, 8, 1, Usage(110, 1, 64), calls=1), 3, 2)
    [event] = ledger.events(REQUEST, 5.0, "ok", 1)
    entry = ledger.entries["fine"]
    assert {name: getattr(event, name) for name in COUNTERS} == entry.counters()
    assert entry.counters() == dict(zip(COUNTERS, (100, 8, 1, 120, 3, 2, 110, 64, 1), strict=True))
