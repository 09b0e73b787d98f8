"""Requests are idempotent by (tenant, request_id).

A redelivery of the same content is admitted once: no second reservation or model work, and it gets the first
decision. The same id with different content is refused as duplicate_request_id, so requests sharing an id cannot
share a reservation and overspend a hard budget. The state is bounded (JEV_IDEMPOTENCY_MAX) and outlives the
process: admissions and first decisions go to the requests-seen topic, which every stage process reads before it
admits anything, and the Sender has a request's usage acknowledged first, so a request found decided was metered.
"""

from __future__ import annotations

import collections
import hashlib
import threading

import orjson

from schemas.records import Decision
from streams.core.tenants import request_key

NEW, REDELIVERY, CONFLICT = "new", "redelivery", "conflict"
LOG_TOPIC = "requests_seen"


def reservation_key(tenant: str, request_id: str) -> str:
    """The budget reservation id of a request: its tenant and id, so two tenants' ids never meet."""
    return request_key(tenant, request_id)


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
    """What this process has admitted or read from the requests-seen log, by (tenant, request_id): the content's
    fingerprint (None when only the decision was read), the first decision, and whether this process admitted
    it itself (a request only read from the log and not decided may have died with its process).

    Each entry is a tuple of bytes, None and a bool, the first decision kept as its JSON: the garbage collector
    stops tracking such a tuple, so the up to JEV_IDEMPOTENCY_MAX entries a busy process holds add nothing to
    its full collections (kept as Decision records they were ~18 tracked objects each, and every full
    collection scanned them all: 149-166 ms per collection at the default bound, against 1.8 ms now)."""

    def __init__(self, max_entries: int = 50_000):
        self.max_entries = max(1, max_entries)
        self.seen: collections.OrderedDict[tuple[str, str], tuple[bytes | None, bytes | None, bool]] = (
            collections.OrderedDict()
        )
        self.lock = threading.Lock()

    def _put(self, key: tuple[str, str], entry: tuple[bytes | None, bytes | None, bool]) -> None:
        """Set the entry for key (where it was, if it was there); the oldest go beyond max_entries."""
        self.seen[key] = entry
        while len(self.seen) > self.max_entries:
            self.seen.popitem(last=False)

    def check(
        self, tenant: str, request_id: str, raw: bytes, print_: bytes | None = None
    ) -> tuple[str, Decision | None]:
        """(NEW, None) the first time (and remember it), (REDELIVERY, first decision or None) for the same
        content again, (CONFLICT, None) for other content under the same (tenant, request_id). A request known
        only from the log and undecided is NEW again here. `print_`: fingerprint(raw), where the caller has it."""
        key, print_ = (tenant, request_id), print_ or fingerprint(raw)
        with self.lock:
            entry = self.seen.get(key)
            if entry is None:
                self._put(key, (print_, None, True))
                return NEW, None
            self.seen.move_to_end(key)
            known, first, here = entry
            if known is not None and known != print_:
                return CONFLICT, None
            if first is None and not here:
                self.seen[key] = (print_, None, True)
                return NEW, None
            if known is None:
                self.seen[key] = (print_, first, here)
            return REDELIVERY, _decision(first)

    def decided(self, tenant: str, decision: Decision) -> tuple[str, bytes, bytes]:
        """Remember the decision sent for (tenant, decision.request_id), for redeliveries to get it again, and
        return its requests-seen record (decided_record, with the content fingerprint when known here)."""
        first = _json(decision)
        with self.lock:
            key = (tenant, decision.request_id)
            entry = self.seen.get(key)
            if entry is not None and entry[1] is None:
                self.seen[key] = (entry[0], first, entry[2])
        return _decided_record(tenant, decision.request_id, first, entry[0] if entry is not None else None)

    def first(self, tenant: str, request_id: str) -> Decision | None:
        """The decision already sent for (tenant, request_id), if known here."""
        with self.lock:
            entry = self.seen.get((tenant, request_id))
        return _decision(entry[1]) if entry is not None else None

    def forget(self, tenant: str, request_id: str) -> None:
        """Drop a request that was not admitted after all (refused by its budget), so a retry is judged anew."""
        with self.lock:
            self.seen.pop((tenant, request_id), None)

    def orphan_undecided(self) -> None:
        """The broker lost its logs (it restarted without its data): the work of a request this process admitted
        and has not decided may have been lost with them, so a redelivery of it is admitted again (NEW) instead
        of waiting for a decision that may never come (at-least-once; a second decision repeats the first).
        Called by each reader of the process that sees the restart, whichever sees it first: the requests-seen
        follower and ingest's own consumer, before ingest reads a record of the new log (a redelivery read before
        the follower noticed was dropped as in flight, and never decided)."""
        with self.lock:
            for key, (known, first, here) in self.seen.items():
                if first is None and here:
                    self.seen[key] = (known, None, False)

    def apply(self, raw: bytes) -> None:
        """One requests-seen record (admitted_record, decided_record), from this process or another: what it
        adds is kept; nothing already known here is replaced."""
        data = orjson.loads(raw)
        key = (data["tenant"], data["request_id"])
        with self.lock:
            known, first, here = self.seen.get(key) or (None, None, False)
            if known is None and data.get("fingerprint"):
                known = bytes.fromhex(data["fingerprint"])
            if first is None and data.get("decision") is not None:
                first = _json(Decision.from_data(data["decision"]))  # kept only once it reads as a Decision
            self._put(key, (known, first, here))


def _json(decision: Decision) -> bytes:
    return orjson.dumps(decision.to_representation())


def _decision(first: bytes | None) -> Decision | None:
    return Decision.from_data(orjson.loads(first)) if first is not None else None


def log_key(tenant: str, request_id: str) -> bytes:
    """The requests-seen record's Kafka key, one per request (compaction keeps the latest per key)."""
    return request_key(tenant, request_id).encode()


def admitted_record(tenant: str, request_id: str, raw: bytes, print_: bytes | None = None) -> tuple[str, bytes, bytes]:
    """The requests-seen record of an admitted request, as an Outbox record: its content fingerprint
    (`print_`: fingerprint(raw), where the caller has it)."""
    return (
        LOG_TOPIC,
        log_key(tenant, request_id),
        orjson.dumps({"tenant": tenant, "request_id": request_id, "fingerprint": (print_ or fingerprint(raw)).hex()}),
    )


def decided_record(tenant: str, decision: Decision, print_: bytes | None = None) -> tuple[str, bytes, bytes]:
    """The requests-seen record of a request's first decision (with its content fingerprint when known: the topic
    is compacted, so this record alone stands for the request), as an Outbox record."""
    return _decided_record(tenant, decision.request_id, _json(decision), print_)


def _decided_record(tenant: str, request_id: str, first: bytes, print_: bytes | None) -> tuple[str, bytes, bytes]:
    record = {"tenant": tenant, "request_id": request_id, "decision": orjson.Fragment(first)}
    if print_ is not None:
        record["fingerprint"] = print_.hex()
    return LOG_TOPIC, log_key(tenant, request_id), orjson.dumps(record)


def decided_here(admitted: list, answered: list) -> list:
    """`admitted` (Outbox records) without the admitted_record of each request whose decided_record is among
    `answered`'s: a request admitted and decided in the same outbox (ingest's local answers) needs one
    requests-seen record, and the decided one carries the fingerprint too. Both would go in the same batch of
    the same partition (one key), so the pair guarded nothing the decided record alone does not; each costs a
    signed produce here and a read and a check in every stage process's follower."""
    decided = {key for topic, key, _ in answered if topic == LOG_TOPIC}
    return (
        [record for record in admitted if record[0] != LOG_TOPIC or record[1] not in decided] if decided else admitted
    )


def conflict_detail(tenant: str, request_id: str) -> str:
    return (
        f"request_id {request_id!r} of tenant {tenant!r} was already used for a request with different "
        f"content: give every new request its own request_id (a retry must resend the same content)"
    )
