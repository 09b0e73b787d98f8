"""Hard budgets by leases: the owner never grants past the limit, state rebuilds from its log, leases come back."""

import random

from schemas.records import BudgetEvent
from streams.budgets.lease_holder import LeaseHold, LeaseHolder
from streams.budgets.lease_owner import LeaseOwner, window_of

KEY, NOW = "tenant:acme@day", 1_800_000_000.0
WINDOW = window_of("day", NOW)


def owner(limit=1000, lease_s=10, grace_s=30):
    return LeaseOwner(lambda key: (limit, "day") if key == KEY else None, lease_s, grace_s)


def ask(request, tokens, holder="h1", lease_id=""):
    return BudgetEvent(kind="lease", key=KEY, holder=holder, request=request, tokens=tokens, lease_id=lease_id)


def test_grants_stop_at_the_limit_and_a_repeated_request_is_answered_once():
    o = owner()
    first = o.grant(ask("a", 600), NOW)
    second = o.grant(ask("b", 600, holder="h2"), NOW)
    assert (first.tokens, second.tokens) == (600, 400)
    assert o.grant(ask("c", 10), NOW).tokens == 0
    assert o.grant(ask("a", 600), NOW) is None


def test_settles_free_what_was_reserved_and_count_what_was_spent():
    o = owner()
    lease = o.grant(ask("a", 1000), NOW)
    o.apply(BudgetEvent(kind="settle", key=KEY, lease_id=lease.lease_id, reserved=300, actual=120, window=WINDOW))
    o.apply(BudgetEvent(kind="return", key=KEY, lease_id=lease.lease_id, tokens=700, window=WINDOW))
    acc = o.accounts[KEY]
    assert (acc.used, acc.held) == (120, 0)
    assert o.grant(ask("b", 5000), NOW).tokens == 880


def test_a_crashed_holders_lease_comes_back_after_expiry_and_grace():
    o = owner(lease_s=10, grace_s=30)
    lease = o.grant(ask("a", 1000), NOW)
    assert o.reclaims(NOW + 39) == []
    [reclaim] = o.reclaims(NOW + 41)
    assert (reclaim.lease_id, reclaim.tokens) == (lease.lease_id, 1000)
    o.apply(reclaim)
    assert o.grant(ask("b", 1000), NOW + 41).tokens == 1000


def test_state_is_the_fold_of_its_log_even_when_a_grant_was_written_twice():
    o = owner()
    log = [o.grant(ask("a", 400), NOW), o.grant(ask("b", 300, holder="h2"), NOW)]
    log.append(BudgetEvent(kind="settle", key=KEY, lease_id=log[0].lease_id, reserved=200, actual=50, window=WINDOW))
    for event in log[2:]:
        o.apply(event)
    rebuilt = owner()
    for event in [*log, log[1]]:  # the second grant redelivered
        rebuilt.apply(event)
    assert (rebuilt.accounts[KEY].used, rebuilt.accounts[KEY].held) == (o.accounts[KEY].used, o.accounts[KEY].held)
    assert rebuilt.grant(ask("b", 300, holder="h2"), NOW) is None


def test_holder_reserves_all_or_nothing_and_asks_ahead_of_need():
    h = LeaseHolder("h1", share=0.1, lease_s=10)
    assert h.reserve([KEY], 50, NOW) == [KEY]
    h.on_grant(KEY, "L1", WINDOW, 100, NOW + 10)
    hold = h.reserve([KEY], 60, NOW)
    assert isinstance(hold, LeaseHold) and hold.leases == {KEY: "L1"}
    assert h.reserve([KEY, "tenant:other@day"], 10, NOW) == ["tenant:other@day"]
    assert h.leases[KEY].balance == 40
    assert h.wanted({KEY: 1000}, NOW) == {KEY: ("L1", 60)}  # under half a slice: topped up to a slice
    assert h.wanted({KEY: 1000}, NOW + 11) == {KEY: ("", 100)}
    assert [k for k, _ in h.expired(NOW + 11)] == [KEY]


def test_many_holders_racing_never_overshoot():
    rng = random.Random(3)
    o, limit = owner(limit=50_000), 50_000
    holders = [LeaseHolder(f"h{i}", share=0.05, lease_s=10) for i in range(3)]
    spent, pending = 0, []
    for step in range(3000):
        h = holders[step % 3]
        need = rng.randint(50, 900)
        held = h.reserve([KEY], need, NOW)
        if not isinstance(held, LeaseHold):
            lease = h.usable(KEY, NOW)
            grant = o.grant(
                ask(f"r{step}", h.slice(limit, need), holder=h.holder, lease_id=lease.lease_id if lease else ""), NOW
            )
            h.on_grant(KEY, grant.lease_id, grant.window, grant.tokens, grant.expires)
            held = h.reserve([KEY], need, NOW)
        if isinstance(held, LeaseHold):
            pending.append((held, need, rng.randint(need // 2, need)))
        if pending and rng.random() < 0.5:
            hold, reserved, actual = pending.pop(rng.randrange(len(pending)))
            spent += actual
            o.apply(
                BudgetEvent(
                    kind="settle", key=KEY, lease_id=hold.leases[KEY], reserved=reserved, actual=actual, window=WINDOW
                )
            )
        assert o.accounts[KEY].used + o.accounts[KEY].held <= limit
    assert spent <= limit
    assert spent > limit * 0.5  # the budget was actually used, not refused wholesale
