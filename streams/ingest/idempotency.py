"""Requests are idempotent by (tenant, request_id).

A redelivery (Kafka's at-least-once, or an upstream retry) of the same content is admitted once: it reserves no
budget again, does no model work again, and gets the first decision (re-sent when that decision is known here;
while the first is still in flight, its decision answers both). The same id with different content is a
different request reusing an id: rejected as duplicate_request_id, so 40 requests under one id cannot share one
reservation and overspend a hard budget, and one tenant's id cannot borrow another tenant's reservation.

The content fingerprint leaves out created_at (a retry may restamp it). State is per stage process, bounded
(JEV_IDEMPOTENCY_MAX entries, oldest dropped first) and in memory: a redelivery that reaches another process
(after a rebalance) or comes after a restart is admitted as new there; its reservation is still held once
(the budget book keys reservations by reservation_key).
"""
from __future__ import annotations

import collections
import hashlib
import threading

import orjson

from schemas.records import Decision

NEW, REDELIVERY, CONFLICT = "new", "redelivery", "conflict"


def reservation_key(tenant: str, request_id: str) -> str:
    """The budget reservation id of a request: its tenant and id, so two tenants' ids never meet."""
    return f"{tenant}\x1f{request_id}"


def fingerprint(raw: bytes) -> bytes:
    """The request's content, created_at aside, as a 16-byte hash (key order does not matter)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return hashlib.blake2b(raw, digest_size=16).digest()
    if isinstance(data, dict):
        data.pop("created_at", None)
    return hashlib.blake2b(orjson.dumps(data, option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


class Requests:
    """What this process has admitted, by (tenant, request_id): the content's fingerprint and the decision."""

    def __init__(self, max_entries: int = 50_000):
        self.max_entries = max(1, max_entries)
        self.seen: collections.OrderedDict[tuple[str, str], list] = collections.OrderedDict()
        self.lock = threading.Lock()

    def check(self, tenant: str, request_id: str, raw: bytes) -> tuple[str, Decision | None]:
        """(NEW, None) the first time (and remember it), (REDELIVERY, first decision or None) for the same
        content again, (CONFLICT, None) for other content under the same (tenant, request_id)."""
        key, print_ = (tenant, request_id), fingerprint(raw)
        with self.lock:
            entry = self.seen.get(key)
            if entry is None:
                self.seen[key] = [print_, None]
                while len(self.seen) > self.max_entries:
                    self.seen.popitem(last=False)
                return NEW, None
            self.seen.move_to_end(key)
            return (REDELIVERY, entry[1]) if entry[0] == print_ else (CONFLICT, None)

    def decided(self, tenant: str, decision: Decision) -> None:
        """Remember the decision sent for (tenant, decision.request_id), for redeliveries to get it again."""
        with self.lock:
            entry = self.seen.get((tenant, decision.request_id))
            if entry is not None and entry[1] is None:
                entry[1] = decision

    def forget(self, tenant: str, request_id: str) -> None:
        """Drop a request that was not admitted after all (refused by its budget), so a retry is judged anew."""
        with self.lock:
            self.seen.pop((tenant, request_id), None)


def conflict_detail(tenant: str, request_id: str) -> str:
    return (f"request_id {request_id!r} of tenant {tenant!r} was already used for a request with different "
            f"content: give every new request its own request_id (a retry must resend the same content)")
