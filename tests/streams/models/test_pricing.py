import pytest

from streams.models import pricing


@pytest.mark.parametrize(
    "model,args,expected",
    [
        ("gpt-4o", (1_000_000, 0, 0), 2.50),
        ("gpt-4o", (1_000_000, 1_000_000, 0), 1.25),
        ("gpt-4o-mini-2024-07-18", (1_000_000, 500_000, 1_000_000), 0.075 + 0.0375 + 0.60),
        ("gpt-4.1-mini", (2_000_000, 0, 500_000), 0.80 + 0.80),
        ("rules", (1000, 0, 10), 0.0),
    ],
)
def test_cost(model, args, expected):
    assert pricing.cost(model, *args) == pytest.approx(expected)


def test_longest_prefix_wins():
    assert pricing.price("gpt-4o-mini") == pricing.PRICES["gpt-4o-mini"]
    assert pricing.price("gpt-4-0613") == pricing.PRICES["gpt-4"]


@pytest.mark.parametrize("args", [(-1, 0, 0), (10, 11, 0), (10, 0, -5)])
def test_bad_counts_are_errors(args):
    with pytest.raises(ValueError, match="cache_read_tokens"):
        pricing.cost("gpt-4o", *args)


def test_register_self_hosted_price():
    pricing.register("acme-llm", 0.1, 0.01, 0.2)
    try:
        assert pricing.max_cost("acme-llm-7b", 1_000_000, 1_000_000) == pytest.approx(0.3)
        with pytest.raises(ValueError):
            pricing.register("acme-llm", -1, 0, 0)
    finally:
        del pricing.PRICES["acme-llm"]


def test_usage_event_carries_cost():
    from schemas.records import Request
    from streams.usage.events import usage_event

    request = Request(request_id="r1", tenant="t", service="s", decision_type="ranking", state="x")
    event = usage_event(request, "score", model="gpt-4o", input_tokens=1000, cache_read_tokens=400, output_tokens=10)
    assert event.cost == pytest.approx((600 * 2.5 + 400 * 1.25 + 10 * 10) / 1e6)
