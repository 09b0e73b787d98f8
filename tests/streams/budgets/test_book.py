import asyncio
import threading

import orjson
import pytest

from schemas.records import Control, Request
from streams.budgets.book import BudgetBook, BudgetError, Refused, Reservation, parse_budget, request_scopes

DAY = 1_763_251_200.0  # 2025-11-16 00:00 UTC


class Clock:
    def __init__(self, t=DAY):
        self.t = t

    def __call__(self):
        return self.t


def book_with(key, clock=None, **value):
    book = BudgetBook(clock or Clock())
    book.apply(Control(kind="budget", key=key, value=value))
    return book


def test_request_scopes():
    request = Request(
        request_id="r",
        tenant="acme",
        service="search",
        decision_type="ranking",
        state="",
        business_line="retail",
        user_id="u1",
    )
    assert request_scopes(request) == [
        "all:*",
        "tenant:acme",
        "service:search",
        "decision_type:ranking",
        "business_line:retail",
        "user:u1",
    ]


def test_reserve_settle_releases_the_rest():
    book = book_with("tenant:acme", hard_tokens=1000)
    r = book.reserve(["tenant:acme"], 600, 0.0)
    assert isinstance(r, Reservation)
    assert isinstance(book.reserve(["tenant:acme"], 500, 0.0), Refused)
    book.settle(r, 200, 0.0)
    assert isinstance(book.reserve(["tenant:acme"], 800, 0.0), Reservation)
    assert isinstance(book.reserve(["tenant:acme"], 1, 0.0), Refused)
    assert book.usage["tenant:acme@day"].used_tokens == 200


def test_unrelated_scopes_are_not_limited():
    book = book_with("tenant:acme", hard_tokens=10)
    assert isinstance(book.reserve(["tenant:other"], 10_000, 1.0), Reservation)


def test_hard_cost_budget_refuses():
    book = book_with("service:search", hard_cost=1.0)
    assert isinstance(book.reserve(["service:search"], 10, 0.7), Reservation)
    refused = book.reserve(["service:search"], 10, 0.4)
    assert isinstance(refused, Refused) and "hard_cost" in refused.reason


def test_refusal_holds_nothing_in_other_scopes():
    book = book_with("tenant:acme", hard_tokens=1000)
    book.apply(Control(kind="budget", key="user:u1", value={"hard_tokens": 100}))
    assert isinstance(book.reserve(["tenant:acme", "user:u1"], 150, 0.0), Refused)
    assert book.usage["tenant:acme@day"].reserved_tokens == 0


def test_degrade_policy_names_the_cheaper_tier_and_reject_wins():
    book = book_with("decision_type:ranking", hard_tokens=100, policy="degrade", degrade_to="gpt-4o-mini")
    refused = book.reserve(["decision_type:ranking"], 200, 0.0)
    assert (refused.policy, refused.degrade_to) == ("degrade", "gpt-4o-mini")
    book.apply(Control(kind="budget", key="tenant:acme", value={"hard_tokens": 100}))
    assert book.reserve(["decision_type:ranking", "tenant:acme"], 200, 0.0).policy == "reject"


def test_soft_thresholds_alert_once_each():
    book = book_with("tenant:acme", soft_tokens=1000, alert_ratios=[1.0, 1.2])
    r = book.reserve(["tenant:acme"], 900, 0.0)
    assert r.alerts == ()
    alerts = book.settle(r, 1100, 0.0)
    assert [(a.rule, a.threshold) for a in alerts] == [("budget_soft", 1000.0)]
    r2 = book.reserve(["tenant:acme"], 200, 0.0)
    assert [(a.severity, a.threshold) for a in r2.alerts] == [("critical", 1200.0)]
    assert book.settle(r2, 200, 0.0) == []


def test_first_hard_refusal_raises_one_alert():
    book = book_with("tenant:acme", hard_tokens=10)
    assert [a.rule for a in book.reserve(["tenant:acme"], 11, 0.0).alerts] == ["budget_hard"]
    assert book.reserve(["tenant:acme"], 11, 0.0).alerts == ()


def test_periods_roll_over():
    clock = Clock()
    book = book_with("tenant:acme", clock, hard_tokens=100)
    book.apply(Control(kind="budget", key="tenant:acme@month", value={"hard_tokens": 150}))
    book.settle(book.reserve(["tenant:acme"], 100, 0.0), 100, 0.0)
    clock.t += 86_400
    refused = book.reserve(["tenant:acme"], 100, 0.0)  # a new day, but the month has 50 left
    assert isinstance(refused, Refused) and refused.budget == "tenant:acme@month"
    assert isinstance(book.reserve(["tenant:acme"], 50, 0.0), Reservation)


def test_settle_and_redelivery_are_idempotent():
    book = book_with("tenant:acme", hard_tokens=100)
    r = book.reserve(["tenant:acme"], 60, 0.0, reservation_id="req-1")
    assert book.reserve(["tenant:acme"], 60, 0.0, reservation_id="req-1") is r
    book.settle(r, 50, 0.0)
    book.settle(r, 50, 0.0)
    assert book.usage["tenant:acme@day"].used_tokens == 50


def test_expire_releases_stale_reservations():
    clock = Clock()
    book = book_with("tenant:acme", clock, hard_tokens=100)
    book.reserve(["tenant:acme"], 100, 0.0)
    clock.t += 600
    assert book.expire(300) == 1
    assert isinstance(book.reserve(["tenant:acme"], 100, 0.0), Reservation)


def test_snapshot_restore_survives_a_restart():
    clock = Clock()
    book = book_with("tenant:acme", clock, hard_tokens=1000, soft_tokens=500, policy="degrade")
    book.settle(book.reserve(["tenant:acme"], 300, 0.01), 250, 0.01)
    held = book.reserve(["tenant:acme"], 400, 0.02)
    restored = BudgetBook.restore(orjson.loads(orjson.dumps(book.snapshot())), clock)
    assert restored.snapshot() == orjson.loads(orjson.dumps(book.snapshot()))
    assert isinstance(restored.reserve(["tenant:acme"], 351, 0.0), Refused)
    restored.settle(restored.open[held.id], 100, 0.0)
    assert isinstance(restored.reserve(["tenant:acme"], 650, 0.0), Reservation)


def test_empty_value_removes_a_budget():
    book = book_with("tenant:acme", hard_tokens=1)
    book.apply(Control(kind="budget", key="tenant:acme", value=None))
    assert isinstance(book.reserve(["tenant:acme"], 100, 0.0), Reservation)


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("tenant:acme", {"hard_tokens": -1}, "non-negative"),
        ("tenant:acme", {"hard_tokens": 10**15}, "absurd"),
        ("tenant:acme", {"hard_cost": 1e12}, "absurd"),
        ("tenant:acme", {"hard_cost": float("inf")}, "non-negative"),
        ("tenant:acme", {"hard_tokens": 1.5}, "integer"),
        ("tenant:acme", {"soft_tokens": 10, "hard_tokens": 5}, "soft must not exceed hard"),
        ("tenant:acme", {"hard_tokens": 5, "policy": "pray"}, "reject or degrade"),
        ("tenant:acme", {"hard_tokns": 5}, "mapping of"),
        ("tenant:acme", {"policy": "reject"}, "at least one"),
        ("tenant:acme@week", {"hard_tokens": 5}, "day or month"),
        ("planet:earth", {"hard_tokens": 5}, "KIND:NAME"),
        ("tenant:acme", {"hard_tokens": 5, "alert_ratios": [0]}, "alert_ratios"),
    ],
)
def test_bad_budgets_are_clear_errors(key, value, match):
    with pytest.raises(BudgetError, match=match):
        parse_budget(key, value)


def test_negative_reservation_is_an_error():
    with pytest.raises(ValueError):
        BudgetBook().reserve(["tenant:a"], -1, 0.0)


def test_concurrent_threads_never_overshoot():
    book = book_with("tenant:acme", hard_tokens=10_000)
    granted = []

    def worker():
        for _ in range(100):
            if isinstance(r := book.reserve(["tenant:acme"], 37, 0.0), Reservation):
                granted.append(r)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 10_000 // 37
    assert book.usage["tenant:acme@day"].reserved_tokens == 37 * len(granted) <= 10_000


async def test_concurrent_asyncio_tasks_never_overshoot():
    book = book_with("tenant:acme", hard_tokens=5_000)

    async def one(i):
        await asyncio.sleep(0)
        r = book.reserve(["tenant:acme"], 100, 0.0)
        await asyncio.sleep(0)  # model work
        if isinstance(r, Reservation):
            book.settle(r, 100, 0.0)
        return r

    results = await asyncio.gather(*(one(i) for i in range(1000)))
    assert sum(isinstance(r, Reservation) for r in results) >= 50
    assert book.usage["tenant:acme@day"].used_tokens <= 5_000


@pytest.mark.parametrize("value", ["lots", 5, {"hard_tokens": 5, "alert_ratios": "high"}])
def test_malformed_control_values_are_budget_errors(value):
    with pytest.raises(BudgetError):
        BudgetBook().apply(Control(kind="budget", key="tenant:acme", value=value))


def test_integral_floats_are_accepted_as_token_limits():
    assert parse_budget("tenant:a", {"hard_tokens": 1e6}).hard_tokens == 1_000_000
