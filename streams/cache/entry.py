"""Cache entries, version invalidation and the refresh queue shared by every cache level.

Each entry records the template/prompt/model versions it was answered under. A version bump (control
topic) does not expire anything: a stale entry is served once, marked stale, while its key goes on a
deduplicated refresh queue; after that one serve it is a miss until a fresh answer replaces it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Entry:
    value: Any  # what is served on a hit (a Decision as a dict, or text)
    versions: dict[str, str] = field(default_factory=dict)
    tokens: int = 0  # tokens the answer cost: what a hit saves
    level: str = "l1"  # l1 | l2 | l3
    predictive: bool = False  # filled ahead of time by L3, reported apart
    alias_of: str = ""  # L2: the cached question whose answer this key was promoted to (a judged near-miss)
    created: float = field(default_factory=time.time)
    stale_served: bool = False

    def to_dict(self) -> dict:
        return dict(self.__dict__)  # shallow: dataclasses.asdict deep-copied every cached answer on each fill

    @classmethod
    def from_dict(cls, data: Mapping) -> Entry:
        return cls(**data)

    def dumps(self) -> bytes:
        """The entry as JSON, as the L1 table (and its changelog) and the semantic cache keep it: bytes are no work
        for the garbage collector, where an answer's dict holding lists is ~4 tracked objects that every full
        collection scans (100,000 entries, each cache's default bound: 59-85 ms per full collection)."""
        return orjson.dumps(self.__dict__)

    @classmethod
    def loads(cls, raw: bytes) -> Entry:
        return cls.from_dict(orjson.loads(raw))


@dataclass
class Hit:
    key: str
    entry: Entry
    stale: bool = False
    score: float = 1.0  # cosine for L2/L3, 1.0 for an exact hit
    matched: str = ""  # the cached question an L2/L3 hit matched

    @property
    def value(self) -> Any:
        return self.entry.value

    @property
    def level(self) -> str:
        return self.entry.level

    @property
    def predictive(self) -> bool:
        return self.entry.predictive


class VersionBook:
    """Current template/prompt/model versions, as the control topic last announced them."""

    def __init__(self, current: Mapping[str, str] | None = None):
        self.current: dict[str, str] = dict(current or {})

    def bump(self, kind: str, version: str) -> None:
        """`kind` names what is versioned: "prompt", "model", "template:<id>"; entries on another version go stale."""
        self.current[kind] = str(version)

    def stale(self, versions: Mapping[str, str]) -> bool:
        return any(versions.get(kind) != version for kind, version in self.current.items())


class RefreshQueue:
    """Keys whose answers must be recomputed; a key is queued once until `done(key)`, so no stampede."""

    def __init__(self):
        self.queued: OrderedDict[str, Any] = OrderedDict()
        self.in_flight: set[str] = set()

    def put(self, key: str, payload: Any = None) -> bool:
        if key in self.queued or key in self.in_flight:
            return False
        self.queued[key] = payload
        return True

    def take(self, n: int) -> list[tuple[str, Any]]:
        taken: list[tuple[str, Any]] = []
        while self.queued and len(taken) < n:
            key, payload = self.queued.popitem(last=False)
            self.in_flight.add(key)
            taken.append((key, payload))
        return taken

    def done(self, key: str) -> None:
        self.in_flight.discard(key)

    def __len__(self) -> int:
        return len(self.queued)


def serve(
    key: str, entry: Entry | None, book: VersionBook, refresh: RefreshQueue, payload: Any = None, **hit
) -> Hit | None:
    """Fresh entry: a hit. Stale entry: a stale hit the first time (and its refresh queued), then a miss."""
    if entry is None:
        return None
    if not book.stale(entry.versions):
        return Hit(key, entry, **hit)
    if entry.stale_served:
        return None
    entry.stale_served = True
    refresh.put(key, payload)
    return Hit(key, entry, stale=True, **hit)
