"""What the tenant settings let a producer do, said loudly at start: with JEV_TENANTS=* and no JEV_TENANT_KEYS (the
defaults) any producer with write access to the requests topic may send as any tenant, spending its budgets and
rate and reading as it; with named tenants and no keys, as any of them. The warning names the fix (JEV_TENANTS and
JEV_TENANT_KEYS, docs/operations.md "Tenants a producer may speak for") and jev_open_tenancy{allows} stays at 1
while it holds, so a dashboard or an alert sees a deployment left open."""

from __future__ import annotations

import logging
import time

from streams.core import tenants

log = logging.getLogger("jev.tenancy")
FIX = (
    "name the tenants in JEV_TENANTS and give each a key in JEV_TENANT_KEYS, so a producer speaks only for the "
    'tenants whose keys it holds (docs/operations.md, "Tenants a producer may speak for")'
)


def allows(settings) -> tuple[str, str]:
    """(label, what it allows) of these settings: ("", "") when every request must carry its tenant's signature."""
    if settings.tenant_keys:
        return "", ""
    named = tenants.admitted(settings.tenants)
    if named is None:
        return "any_tenant", (
            "JEV_TENANTS=* and no JEV_TENANT_KEYS: any producer that can write the requests topic may send as ANY "
            "tenant, spend that tenant's budgets and rate, and have its requests billed to it"
        )
    return "named_tenants", (
        f"no JEV_TENANT_KEYS: any producer that can write the requests topic may send as any of the "
        f"{len(named)} tenants in JEV_TENANTS ({', '.join(sorted(named)[:5])}{', ...' if len(named) > 5 else ''}) "
        "and spend their budgets"
    )


def announce(settings) -> str:
    """Log (WARNING) and export what these settings allow; the label exported ("" when closed)."""
    from streams.core.metrics import OPEN_TENANCY

    label, said = allows(settings)
    for each in ("any_tenant", "named_tenants"):
        OPEN_TENANCY.labels(each).set(1 if each == label else 0)
    if label:
        log.warning("tenant identity is open: %s; %s", said, FIX)
    return label


DENIED_WRITES = frozenset({"unauthenticated_tenant", "unknown_tenant", "bad_tenant"})
LOG_EVERY_S = 10.0  # denials of one kind, tenant and reason are logged at most this often (with the count between)
_denied: dict[tuple[str, str, str], list] = {}


def denied(kind: str, tenant: str, reason: str, what: str = "") -> None:
    """Log a tenant's denied read or write (`kind`), never its payload: the tenant it claimed, the reason and
    `what` (a request id, the tenant it asked to read). Throttled per kind, tenant and reason, so a flood of
    forged requests costs a line every LOG_EVERY_S with the count."""
    entry = _denied.setdefault((kind, tenant, reason), [0.0, 0])
    entry[1] += 1
    now = time.monotonic()
    if now - entry[0] >= LOG_EVERY_S:
        log.warning(
            "denied %s as tenant %r: %s (%d since the last line%s)",
            kind,
            tenant,
            reason,
            entry[1],
            f"; latest {what}" if what else "",
        )
        entry[0], entry[1] = now, 0
