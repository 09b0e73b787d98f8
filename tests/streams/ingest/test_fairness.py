"""Per-tenant admission rates (token buckets) and the fair order of a micro-batch."""

import pytest

from streams.ingest.fairness import QUANTUM, Rate, TenantLimiter, charged_tokens, fair_order, parse_rates, sender_of


def test_rates_parse_per_tenant_with_a_default():
    assert parse_rates("acme=50:20000, *=200:0") == {"acme": Rate(50, 20000), "*": Rate(200, 0)}
    assert parse_rates("") == {}


@pytest.mark.parametrize("text", ["acme=50", "acme=x:1", "=1:2", "acme=-1:5", "acme"])
def test_a_bad_rate_names_the_setting_and_the_form(text):
    with pytest.raises(ValueError, match="JEV_TENANT_RATES.*TENANT=REQUESTS_PER_S:TOKENS_PER_S"):
        parse_rates(text)


def test_requests_over_the_rate_wait_for_the_bucket_and_others_are_not_touched():
    limiter = TenantLimiter({"flood": Rate(10, 0)})
    assert [limiter.check("flood", 0.0) for _ in range(10)] == [None] * 10  # one second of burst
    wait = limiter.check("flood", 0.0)
    assert wait == pytest.approx(0.1)
    assert limiter.check("flood", 0.05) == pytest.approx(0.05)
    assert limiter.check("flood", 0.1) is None  # one request's worth refilled
    assert all(limiter.check("quiet", 0.0) is None for _ in range(1000))  # no rate named, no default
    assert limiter.limited == 2


def test_tokens_spent_put_the_tenant_in_debt_until_refilled():
    limiter = TenantLimiter({"*": Rate(0, 1000)})
    assert limiter.check("阿里", 0.0) is None
    limiter.spend("阿里", 3000, 0.0)  # a big request is admitted whole, then the bucket owes 2000
    assert limiter.check("阿里", 0.0) == pytest.approx(2.0)
    assert limiter.check("阿里", 2.0) is None
    assert limiter.check("acme", 0.0) is None  # each tenant its own bucket under the default


def test_no_rates_no_limit():
    limiter = TenantLimiter({})
    limiter.spend("acme", 10**9, 0.0)
    assert limiter.check("acme", 0.0) is None


def test_fair_order_alternates_tenants_and_puts_large_records_behind_small_ones():
    items = [("flood", i, 100) for i in range(6)] + [
        ("acme", 0, 100),
        ("acme", 1, 5 * QUANTUM),
        ("acme", 2, 100),
        ("ali", 0, 100),
    ]
    order = fair_order(items, lambda x: x[0], lambda x: x[2])
    assert [(t, i) for t, i, _ in order] == [
        ("flood", 0),
        ("acme", 0),
        ("ali", 0),
        ("flood", 1),
        ("flood", 2),
        ("flood", 3),
        ("flood", 4),
        ("flood", 5),
        ("acme", 1),
        ("acme", 2),
    ]
    assert order.index(("acme", 1, 5 * QUANTUM)) == len(items) - 2  # five rounds of deficit: after the small ones
    assert [x for x in order if x[0] == "flood"] == [x for x in items if x[0] == "flood"]  # arrival order kept
    assert sorted(order) == sorted(items)


def test_one_tenant_keeps_its_order():
    items = [("acme", i, 10 * i) for i in range(5)]
    assert fair_order(items, lambda x: x[0], lambda x: x[2]) == items


def test_sender_is_read_without_trusting_the_record():
    assert sender_of(b'{"tenant": "acme", "request_id": "r1"}', 1000) == ("acme", "r1", 0)
    assert sender_of(b'{"tenant": "acme", "request_id": "r1", "deadline_ms": 300}', 1000) == ("acme", "r1", 300)
    assert sender_of(b'{"tenant": 5, "request_id": ["r"], "deadline_ms": "soon"}', 1000) == ("", "", 0)
    assert sender_of(b'{"tenant": "acme", "deadline_ms": -5}', 1000) == ("acme", "", 0)
    assert sender_of(b"{broken", 1000) == ("", "", 0)
    assert sender_of(b'{"tenant": "acme"}' + b" " * 2000, 1000) == ("", "", 0)


def test_a_request_is_charged_for_what_was_sent_not_only_what_its_contract_kept():
    assert charged_tokens(240_000, 3_000) == 60_000  # a long history truncated to 3,000 tokens was counted whole
    assert charged_tokens(400, 150) == 150
