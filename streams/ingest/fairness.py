"""Fairness between tenants at ingest: a per-tenant admission rate and a fair order inside each micro-batch.

Rates (JEV_TENANT_RATES) are token buckets on requests and tokens per tenant, checked before any decoding: an
over-rate request is rejected `rate_limited` with `retry_after_s`, never dropped silently, so a flood costs that
check alone. Inside a micro-batch, requests are taken in deficit round-robin over tenants weighed by their bytes,
so a flood queues behind its own tenant.

The buckets are per ingest process, each holding its share of every rate: requests are keyed by session or request
id, so a tenant's requests spread over the requests topic's partitions, and a process that reads k of n of them
sees about k/n of each tenant's requests and admits k/n of its rate (`TenantLimiter.hold`). The fleet admits the
rate with no state shared (docs/operations.md, "Tenant rates across processes").
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from streams.core.tenants import BadTenant, canonical, unbound

BURST_S = 1.0  # seconds of rate a bucket holds: a tenant idle for a while may send this much at once
QUANTUM = 16_384  # bytes a tenant's deficit grows by per round of the fair order


@dataclass(frozen=True)
class Rate:
    requests_s: float  # 0 = no limit
    tokens_s: float  # 0 = no limit


def parse_rates(text: str) -> dict[str, Rate]:
    """JEV_TENANT_RATES as {tenant: Rate}; '' = no limits. Raises ValueError naming the bad entry."""
    rates = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        tenant, _, value = entry.rpartition("=")
        parts = value.split(":")
        try:
            if not tenant.strip() or len(parts) != 2:
                raise ValueError
            rate = Rate(float(parts[0]), float(parts[1]))
            if rate.requests_s < 0 or rate.tokens_s < 0:
                raise ValueError
        except ValueError:
            raise ValueError(
                f"JEV_TENANT_RATES entry {entry!r}: expected TENANT=REQUESTS_PER_S:TOKENS_PER_S "
                f"(numbers >= 0, 0 = no limit), e.g. acme=50:20000,*=200:100000"
            ) from None
        rates[tenant.strip()] = rate
    return rates


class Bucket:
    def __init__(self, rate: float, now: float, least: float = 0.0):
        """`least`: the smallest capacity (1 for requests: a process with a small share of a low rate still admits
        a request now and then)."""
        self.least, self.updated = least, now
        self.rate, self.capacity = rate, max(rate * BURST_S, least)
        self.level = self.capacity

    def refill(self, now: float) -> float:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now
        return self.level

    def rescale(self, rate: float, now: float) -> None:
        """From now, `rate` (what has refilled so far at the old rate stays, up to the new capacity)."""
        self.refill(now)
        self.rate, self.capacity = rate, max(rate * BURST_S, self.least)
        self.level = min(self.level, self.capacity)


class TenantLimiter:
    """Token buckets per tenant, at this process's share of each rate: `check` before decoding, `spend` once the
    tokens are counted, `hold` when the process's share of the requests topic changes."""

    def __init__(self, rates: dict[str, Rate], max_tenants: int = 100_000):
        self.rates, self.max_tenants = rates, max_tenants
        self.buckets: OrderedDict[str, tuple[Bucket | None, Bucket | None]] = OrderedDict()
        self.limited = 0
        self.share = 1.0  # of every rate: the share of the requests topic's partitions this process reads

    @classmethod
    def of(cls, settings) -> TenantLimiter:
        return cls(parse_rates(settings.tenant_rates))

    def rate(self, tenant: str) -> Rate:
        return self.rates.get(tenant) or self.rates.get("*") or Rate(0, 0)

    def hold(self, held: int, partitions: int, now: float | None = None) -> None:
        """This process reads `held` of the requests topic's `partitions`: from now it admits that share of each
        tenant's rate. None held or none known (before the first assignment, during a rebalance) changes nothing:
        a process starts at the whole rate, as a lone one."""
        if held <= 0 or partitions <= 0 or min(held, partitions) / partitions == self.share:
            return
        share = min(held, partitions) / partitions
        now = time.monotonic() if now is None else now
        self.share = share
        for tenant, (requests, tokens) in self.buckets.items():
            rate = self.rate(tenant)
            if requests is not None:
                requests.rescale(rate.requests_s * share, now)
            if tokens is not None:
                tokens.rescale(rate.tokens_s * share, now)

    def _buckets(self, tenant: str, now: float) -> tuple[Bucket | None, Bucket | None]:
        found = self.buckets.get(tenant)
        if found is None:
            rate = self.rate(tenant)
            found = (
                Bucket(rate.requests_s * self.share, now, least=1.0) if rate.requests_s else None,
                Bucket(rate.tokens_s * self.share, now) if rate.tokens_s else None,
            )
            self.buckets[tenant] = found
            if len(self.buckets) > self.max_tenants:  # a full bucket again for the tenant idle longest
                self.buckets.popitem(last=False)
        else:
            self.buckets.move_to_end(tenant)
        return found

    def check(self, tenant: str, now: float | None = None) -> float | None:
        """None when `tenant` may send one more request now (taken from its bucket), else the seconds after
        which it may."""
        if not self.rates:
            return None
        now = time.monotonic() if now is None else now
        requests, tokens = self._buckets(tenant, now)
        waits = []
        if requests is not None and requests.refill(now) < 1:
            waits.append((1 - requests.level) / requests.rate)
        if tokens is not None and tokens.refill(now) < 0:
            waits.append(-tokens.level / tokens.rate)
        if waits:
            self.limited += 1
            return max(waits)
        if requests is not None:
            requests.level -= 1
        return None

    def spend(self, tenant: str, n_tokens: int, now: float | None = None) -> None:
        """Charge an admitted request's counted tokens to its tenant (the bucket may go into debt)."""
        if not self.rates:
            return
        now = time.monotonic() if now is None else now
        tokens = self._buckets(tenant, now)[1]
        if tokens is not None:
            tokens.refill(now)
            tokens.level -= n_tokens


def charged_tokens(raw_bytes: int, counted: int) -> int:
    """What an admitted request takes from its tenant's tokens bucket: its counted input tokens, at least a quarter
    of its bytes (a history truncated to its contract was still all read and counted)."""
    return max(counted, raw_bytes // 4)


def sender_of(raw: bytes, max_bytes: int, keys: dict[str, bytes] | None = None, headers=()) -> tuple[str, str, float]:
    """(tenant, request_id, deadline_ms) a request names, read for the checks and the order before decoding, the
    tenant by its canonical name; '' for what is not readable or not a valid tenant name (decoding rejects the
    request then, with the reason) and for records over `max_bytes` (rejected unparsed); deadline_ms 0 where it
    sets none, or none that is a positive number (decoding says what is wrong with it). With tenant `keys`
    (JEV_TENANT_KEYS) the tenant is '' too unless the message's `headers` carry that tenant's signature: a request
    is charged to a tenant's rate and fair share only once it is known to come from that tenant."""
    if len(raw) > max_bytes:
        return "", "", 0
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "", "", 0
    if not isinstance(data, dict):
        return "", "", 0
    tenant, request_id, deadline_ms = data.get("tenant"), data.get("request_id"), data.get("deadline_ms")
    try:  # the canonical name (streams.core.tenants), so no spelling of a tenant has a rate of its own
        tenant = canonical(tenant) if isinstance(tenant, str) else ""
    except BadTenant:
        tenant = ""
    if tenant and unbound(keys, tenant, raw, headers):  # decoding rejects it unauthenticated_tenant, naming why
        tenant = ""
    if isinstance(deadline_ms, bool) or not isinstance(deadline_ms, int | float) or deadline_ms <= 0:
        deadline_ms = 0
    return tenant, request_id if isinstance(request_id, str) else "", deadline_ms


def fair_order(items: list, tenant: Callable, size: Callable, quantum: int = QUANTUM) -> list:
    """`items` in deficit round-robin over their tenants (first come first, within a tenant arrival order): each
    round adds `quantum` to a tenant's deficit and an item costs its `size`, at least `quantum`, so small items
    alternate one per tenant per round and an item of k quanta waits k rounds."""
    queues: OrderedDict[str, list] = OrderedDict()
    for item in items:
        queues.setdefault(tenant(item), []).append(item)
    if len(queues) < 2:
        return list(items)
    out, deficit, heads = [], dict.fromkeys(queues, 0), dict.fromkeys(queues, 0)
    while queues:
        for name in list(queues):
            queue = queues[name]
            deficit[name] += quantum
            while heads[name] < len(queue) and max(quantum, size(queue[heads[name]])) <= deficit[name]:
                deficit[name] -= max(quantum, size(queue[heads[name]]))
                out.append(queue[heads[name]])
                heads[name] += 1
            if heads[name] == len(queue):
                del queues[name]
    return out
