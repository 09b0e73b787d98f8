"""Raw request text, opt-in: off by default (JEV_RAW_TEXT_DAYS=0), when ClickHouse keeps only hashes, counts
and redacted snippets. With N days, ingest stores each admitted request's text (state, history, candidates,
template variables) in request_texts, a table of its own whose TTL deletes rows N days after they were
stored; the usage tables never hold it. Storing is best effort: a failed insert is logged and dropped, so
the text never holds up or crashes the stage (the usage spine has the durable path).
"""

from __future__ import annotations

import logging
import time

import orjson

from infra.clickhouse import keep_request_texts

log = logging.getLogger("jev.usage.texts")
COLUMNS = [
    "request_id",
    "ts",
    "tenant",
    "service",
    "decision_type",
    "session_id",
    "state",
    "history",
    "candidates",
    "variables",
]


def _json(value) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def text_columns(requests: list, now: float) -> list[list]:
    """Column-oriented rows of request_texts (ts in ms ticks), one per request."""
    rows = [
        [
            r.request_id,
            round(now * 1000),
            r.tenant,
            r.service,
            r.decision_type,
            r.session_id,
            _json(r.state),
            _json([{"role": t.role, "content": t.content} for t in r.history]),
            _json([{"id": c.id, "text": c.text} for c in r.candidates]),
            _json(r.template.variables if r.template else {}),
        ]
        for r in requests
    ]
    return [list(column) for column in zip(*rows)] if rows else [[] for _ in COLUMNS]


class RequestTexts:
    """`store(requests)` writes their raw text to request_texts (created with its TTL on construction)."""

    def __init__(self, client, days: int):
        keep_request_texts(client, days)
        self.client, self.days, self.dropped = client, days, 0

    def store(self, requests: list, now: float | None = None) -> int:
        """Insert the requests' text; returns the rows written (0 when ClickHouse refused, logged)."""
        if not requests:
            return 0
        try:
            self.client.insert(
                "request_texts", text_columns(requests, now or time.time()), column_names=COLUMNS, column_oriented=True
            )
        except Exception as e:
            self.dropped += len(requests)
            log.warning("raw text of %d requests not stored (%s); %d dropped so far", len(requests), e, self.dropped)
            return 0
        return len(requests)


def request_texts(settings, client) -> RequestTexts | None:
    """The raw-text store when JEV_RAW_TEXT_DAYS opts in, else None (the default: nothing stored)."""
    return RequestTexts(client, settings.raw_text_days) if settings.raw_text_days > 0 else None
