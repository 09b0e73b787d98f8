"""Cache-state records: L2 fills (a promoted near-miss is the fill of its alias entry), L2 verdicts and L3 follow-up
observations, as plain JSON dicts.

Every stage process reads the cache-state topic from its beginning and applies every record (`apply`), so a
restarted process, or one taking over another's partitions, holds the same L2 entries, learned thresholds and
follow-up statistics; a process skips its own records (`origin`). A rebuild from the beginning rather than a Faust
table changelog, because the local broker's ListOffsets LATEST is wrong (docs/operations.md).
"""

from __future__ import annotations

import base64

import numpy as np

from streams.cache.entry import Entry
from streams.cache.semantic import Candidate


def filled(partition: tuple, question: str, entry: Entry, vector) -> dict:
    """An L2/L3 entry; its vector as base64 float32 (None: re-embedded from the question at restore)."""
    encoded = None if vector is None else base64.b64encode(np.asarray(vector, dtype=np.float32).tobytes()).decode()
    return {
        "op": "fill",
        "partition": list(partition),
        "question": question,
        "entry": entry.to_dict(),
        "vector": encoded,
    }


def verdict(candidate: Candidate, agreed: bool) -> dict:
    return {"op": "verdict", "candidate": candidate.to_dict(), "agreed": bool(agreed)}


def observed(tenant: str, session_id: str, question: str) -> dict:
    """An L3 observation: `tenant`'s follow-up model only (a tenant's questions shape its own pre-answers)."""
    return {"op": "observe", "tenant": tenant, "session": session_id, "question": question}


def apply(stage, records: list[dict]) -> None:
    """Apply records to a CacheStage, in order; fills are batched per partition (one embedding call)."""
    pending: list[dict] = []
    for record in records:
        op = record.get("op")
        if op == "fill":
            pending.append(record)
            continue
        _fill(stage, pending)
        pending = []
        if op == "verdict" and stage.semantic is not None:
            stage.semantic.learn(Candidate.from_dict(record["candidate"]), record["agreed"])
        elif op == "observe":
            stage.followups.of(record.get("tenant", "")).observe(record["session"], record["question"])
        elif op != "fill":
            raise ValueError(f"unknown cache-state record op {op!r}: expected fill, verdict or observe")
    _fill(stage, pending)


def _fill(stage, records: list[dict]) -> None:
    if stage.semantic is None or not records:
        return
    by_partition: dict[tuple, list[dict]] = {}
    for record in records:
        by_partition.setdefault(tuple(record["partition"]), []).append(record)
    for partition, group in by_partition.items():
        entries = [Entry.from_dict(r["entry"]) for r in group]
        texts = [r["question"] for r in group]
        if all(r["vector"] for r in group):
            vectors = np.stack([np.frombuffer(base64.b64decode(r["vector"]), dtype=np.float32) for r in group])
        else:
            vectors = None
        stage.semantic.insert_many(partition, texts, entries, vectors)
