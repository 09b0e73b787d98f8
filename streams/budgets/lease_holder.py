"""A stage process's side of hard token budgets: it reserves locally against leases from the budgets' owners
(streams.budgets.lease_owner), asks for more ahead of need, and hands back what it did not use.

A reservation takes the request's worst case from the lease of every hard budget that covers it, at once or not at
all (no await between check and update). When a lease runs low (under half a slice) or near its expiry, `wanted`
names the top-ups to ask for, so a steady flow of requests rarely waits on the owner; a request that finds too
little waits for the owner's answer (streams.runtime.leases), and is refused if the owner grants too little. A
lease taken under a higher hard limit than the one now in force is taken back (`lowered`): its balance returns to
the owner, and the next reservation asks anew under the lowered limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Held:
    lease_id: str
    window: str
    balance: int
    expires: float
    limit: int = 0  # the hard limit in force when it was granted (0: unknown)


@dataclass(frozen=True)
class LeaseHold:
    """What a request holds: budget key -> lease id, `tokens` from each."""

    leases: dict[str, str]
    tokens: int


class LeaseHolder:
    def __init__(self, holder: str, share: float, lease_s: float):
        """`share`: the slice of a hard limit one lease asks for (JEV_BUDGET_LEASE_SHARE)."""
        self.holder, self.share, self.lease_s = holder, share, lease_s
        self.leases: dict[str, Held] = {}

    def slice(self, limit: int, need: int = 0) -> int:
        return max(need, math.ceil(self.share * limit), 1)

    def usable(self, key: str, now: float) -> Held | None:
        held = self.leases.get(key)
        return held if held is not None and held.expires > now else None

    def reserve(self, keys: list[str], tokens: int, now: float) -> LeaseHold | list[str]:
        """Take `tokens` from the lease of every key, or nothing: then the keys whose lease lacks them."""
        short = [k for k in keys if (h := self.usable(k, now)) is None or h.balance < tokens]
        if short:
            return short
        for k in keys:
            self.leases[k].balance -= tokens
        return LeaseHold({k: self.leases[k].lease_id for k in keys}, tokens)

    def on_grant(
        self, key: str, lease_id: str, window: str, tokens: int, expires: float, limit: int = 0
    ) -> Held | None:
        """Add a grant to the key's lease, or take a new lease: then the one it replaces (to be returned). `limit`:
        the key's hard limit as this process knows it now."""
        held = self.leases.get(key)
        if held is not None and held.lease_id == lease_id:
            held.balance += tokens
            held.expires = max(held.expires, expires)
            held.limit = max(held.limit, limit)
            return None
        if tokens or held is None:
            self.leases[key] = Held(lease_id, window, tokens, expires, limit)
            return held
        return None

    def lowered(self, limits: dict[str, int]) -> list[tuple[str, Held]]:
        """Leases granted under a higher hard limit than `limits` (key -> the limit now), removed: their balance is
        to be returned to the owner, who grants again only what the lowered limit leaves."""
        gone = [(k, h) for k, h in self.leases.items() if k in limits and limits[k] < h.limit]
        for k, _ in gone:
            del self.leases[k]
        return gone

    def wanted(self, limits: dict[str, int], now: float) -> dict[str, tuple[str, int]]:
        """key -> (lease id to top up or "", tokens): leases under half a slice, or within a third of their
        lifetime of expiry (renewed ahead of need so that reservations do not wait)."""
        out = {}
        for key, limit in limits.items():
            held, want = self.leases.get(key), self.slice(limit)
            if held is None or held.expires <= now:
                out[key] = ("", want)
            elif held.balance < want / 2 or held.expires - now < self.lease_s / 3:
                out[key] = (held.lease_id, max(0, want - held.balance))
        return out

    def expired(self, now: float) -> list[tuple[str, Held]]:
        """Leases past their expiry, removed: their balance is to be returned to the owner."""
        gone = [(k, h) for k, h in self.leases.items() if h.expires <= now]
        for k, _ in gone:
            del self.leases[k]
        return gone
