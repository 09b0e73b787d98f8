"""The owner of hard token budgets: the partition of the budget topic that holds a budget's key grants slices of it
(leases) to stage processes, so no process needs a global lock and no budget is overshot.

State is the fold of the partition's grant, settle, return and reclaim events, so a new owner rebuilds it by
reading the partition from the start. Each settle and return counts once: a replay of a validly signed one (the
signature covers only the topic and the bytes) or a stage's redelivered micro-batch carries the same id (`request`:
derived from what it settles; an event without one is identified by its content) and changes nothing.

It grants only while spent + everything leases still hold + the ask ≤ the hard limit, and reclaims what an expired
lease still holds once its reservations can no longer be spent. What leases can strand at a period's end, and the
timing assumptions: docs/architecture.md, "Replicas".
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field

from schemas.records import BudgetEvent
from streams.budgets.book import PERIODS

CHANGES = ("grant", "settle", "return", "reclaim")
log = logging.getLogger("jev.leases")


@dataclass
class Lease:
    holder: str
    granted: int
    expires: float
    settled: int = 0  # reservations against it that settled (their worst case)
    returned: int = 0

    @property
    def held(self) -> int:
        return max(0, self.granted - self.settled - self.returned)


@dataclass
class Account:
    window: str
    used: int = 0
    leases: dict[str, Lease] = field(default_factory=dict)
    applied: set[str] = field(default_factory=set)  # the settles and returns counted (their ids), this period

    @property
    def held(self) -> int:
        return sum(lease.held for lease in self.leases.values())


def change_id(event: BudgetEvent) -> str:
    """What identifies a settle or return: its `request` id, or (an event written without one) a digest of every
    field, so a byte-identical replay is the same change."""
    if event.request:
        return event.request
    fields = (event.kind, event.key, event.holder, event.lease_id, event.window, event.tokens, event.reserved)
    return hashlib.sha256(repr((*fields, event.actual, event.ts)).encode()).hexdigest()[:32]


def settle_id(key: str, lease_id: str, reservations: list[str]) -> str:
    """The id of the settle of `reservations` (their reservation keys) on one lease: the same works settled again (a
    redelivered micro-batch) give the same id, so they count once."""
    return hashlib.sha256("\x00".join([key, lease_id, *sorted(reservations)]).encode()).hexdigest()[:32]


def window_of(period: str, now: float) -> str:
    return time.strftime(PERIODS[period], time.gmtime(now))


class LeaseOwner:
    """The accounts of the budget keys one owner holds. `limits(key)` gives a key's hard token limit and period
    (from the control topic's budget records), or None when the key has no hard token budget."""

    def __init__(self, limits, lease_s: float, grace_s: float):
        self.limits, self.lease_s, self.grace_s = limits, lease_s, grace_s
        self.accounts: dict[str, Account] = {}
        self.answered: dict[str, int] = {}  # lease request -> tokens granted (a request is answered once)

    def account(self, key: str, window: str) -> Account:
        acc = self.accounts.get(key)
        if acc is None or acc.window < window:  # a new period starts from nothing
            acc = self.accounts[key] = Account(window)
        return acc

    def apply(self, event: BudgetEvent) -> None:
        """Fold one change of the log (a grant, settle, return or reclaim) into the accounts."""
        if event.kind not in CHANGES:
            return
        acc = self.account(event.key, event.window)
        if acc.window != event.window:  # an event of a period already over
            return
        lease = acc.leases.get(event.lease_id)
        if event.kind == "grant":
            # A grant read again (the owner's own, or one answered twice across an owner's crash) counts once, at
            # the larger amount: the holder may have taken either.
            before = self.answered.get(event.request)
            extra = event.tokens - (before or 0)
            self.answered[event.request] = max(event.tokens, before or 0)
            if lease is None:
                acc.leases[event.lease_id] = Lease(event.holder, max(0, extra), event.expires)
            else:  # a top-up of the holder's lease, or a repeat
                lease.granted += max(0, extra)
                lease.expires = max(lease.expires, event.expires)
        elif event.kind in ("settle", "return") and (ident := change_id(event)) in acc.applied:
            log.info("ignoring %s %s of %s read again (a replay or a redelivery)", event.kind, ident, event.key)
            return
        elif event.kind == "settle":
            if event.actual < 0 or event.reserved < 0:
                log.warning(
                    "refusing settle of %s on lease %s: negative tokens (reserved %d, actual %d) would "
                    "hand spent budget back",
                    event.key,
                    event.lease_id,
                    event.reserved,
                    event.actual,
                )
                return
            acc.applied.add(change_id(event))
            acc.used += event.actual
            if lease is not None:  # what a lease frees is at most what it still holds
                lease.settled += min(event.reserved, lease.held)
        elif event.kind == "return":
            acc.applied.add(change_id(event))
            if lease is not None:
                lease.returned += max(0, min(event.tokens, lease.held))
        elif event.kind == "reclaim":
            acc.leases.pop(event.lease_id, None)

    def grant(self, request: BudgetEvent, now: float) -> BudgetEvent | None:
        """Answer a lease request: the grant event to append to the log (and send to the holder), already folded
        in; None for a request answered before. A grant of 0 tokens is a refusal: the budget is spent or held."""
        if request.request in self.answered:
            return None
        limit = self.limits(request.key)
        window = window_of(limit[1], now) if limit else request.window
        acc = self.account(request.key, window)
        room = limit[0] - acc.used - acc.held if limit else request.tokens
        tokens = max(0, min(request.tokens, room))
        # A top-up adds to the holder's live lease and keeps its expiry; in the last third of its life the holder gets
        # a new lease instead, so leases rotate and what never settles on the old one is reclaimed after its grace.
        current = next(
            (
                lease_id
                for lease_id, lease in acc.leases.items()
                if lease.holder == request.holder and lease.expires - now > self.lease_s / 3
            ),
            "",
        )
        expires = acc.leases[current].expires if current else now + self.lease_s
        grant = BudgetEvent(
            kind="grant",
            key=request.key,
            holder=request.holder,
            request=request.request,
            lease_id=current or request.request,
            window=window,
            tokens=tokens,
            expires=expires,
            ts=now,
        )
        self.apply(grant)
        return grant

    def reclaims(self, now: float) -> list[BudgetEvent]:
        """Reclaim events for every lease past its expiry and the grace of its last reservations."""
        return [
            BudgetEvent(
                kind="reclaim",
                key=key,
                lease_id=lease_id,
                holder=lease.holder,
                window=acc.window,
                tokens=lease.held,
                ts=now,
            )
            for key, acc in self.accounts.items()
            for lease_id, lease in acc.leases.items()
            if lease.expires + self.grace_s < now
        ]
