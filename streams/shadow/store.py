"""Verdicts into ClickHouse (table shadow_verdicts, migration 005), where agreement sits beside the tokens
each mechanism saved (view agreement_by_mechanism_day). Best effort: verdicts are a sample, so a failed insert
is logged and dropped rather than holding up the stage; ReplacingMergeTree on the request id absorbs
redelivered verdicts (read with FINAL)."""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger("jev.shadow")
COLUMNS = [
    "request_id",
    "ts",
    "tenant",
    "service",
    "decision_type",
    "kind",
    "mechanisms",
    "agreed",
    "kept",
    "similarity",
    "served_tier",
    "naive_tier",
    "served_action",
    "naive_action",
    "labelled",
    "served_correct",
    "naive_correct",
    "served_tokens",
    "naive_tokens",
    "nominal_tokens",
]
TS = COLUMNS.index("ts")


def verdict_columns(verdicts: list) -> list[list]:
    columns = [[v.__dict__[name] for v in verdicts] for name in COLUMNS]
    columns[TS] = [round(t * 1000) for t in columns[TS]]
    return columns


class Inserts(Protocol):
    """A ClickHouse client (clickhouse-connect's) as the store writes through it."""

    def insert(self, table: str, data: list, column_names: list[str], column_oriented: bool) -> object: ...


class VerdictStore:
    def __init__(self, client: Inserts):
        self.client, self.rows, self.dropped = client, 0, 0

    def store(self, verdicts: list) -> int:
        if not verdicts:
            return 0
        try:
            self.client.insert("shadow_verdicts", verdict_columns(verdicts), column_names=COLUMNS, column_oriented=True)
        except Exception as exc:
            self.dropped += len(verdicts)
            log.warning("%d shadow verdicts not stored (%s); %d dropped so far", len(verdicts), exc, self.dropped)
            return 0
        self.rows += len(verdicts)
        return len(verdicts)
