"""Time layer: TTL weights by age and weighted selection of exchanges under the token budget."""

from __future__ import annotations

MARKER_TOKENS = 8  # what a provenance marker adds to a kept line, reserved when selecting


def weight(unit: list[int], ts: list[float | None], policy, now: float) -> float:
    """The TTL weight of an exchange: the age of its latest stamped turn (unknown age counts as fresh). The only
    way `now` enters distillation (core.distill keys what it remembers by these weights)."""
    stamps = [stamp for i in unit if (stamp := ts[i]) is not None]
    return policy.ttl_weight(now - max(stamps) if stamps else None)


def select(
    units: list[list[int]],
    unit_tags: list[str],
    costs: list[int],
    ts: list[float | None],
    protected: set[int],
    skip: set[int],
    budget: int | None,
    reserved: int,
    policy,
    now: float,
) -> dict[int, str]:
    """{index: reason} of the turns the time layer drops: `expired` (TTL weight 0) or `budget`
    (lower weight × priority lost the competition for the `budget - reserved` tokens left)."""
    dropped: dict[int, str] = {}
    ranked = []
    for position, (unit, tag) in enumerate(zip(units, unit_tags)):
        live = [i for i in unit if i not in skip and i not in protected]
        if not live:
            continue
        ttl = weight(unit, ts, policy, now)
        if ttl <= 0:
            dropped.update((i, "expired") for i in live)
            continue
        cost = sum(costs[i] + MARKER_TOKENS for i in live)
        ranked.append((ttl * policy.tag_weight(tag), position, cost, live))
    if budget is None:
        return dropped
    left = budget - reserved
    for _, _, cost, live in sorted(ranked, key=lambda r: (r[0], r[1]), reverse=True):
        if cost <= left:
            left -= cost
        else:
            dropped.update((i, "budget") for i in live)
    return dropped
