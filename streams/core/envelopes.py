"""Envelopes: internal topics carry micro-batches (one WorkBatch or UsageBatch per message), external ones one
record per message. Faust's per-message cost, not the broker, bounds a stage's throughput, so fewer, larger
messages between stages are what keep it off the hot path."""

from __future__ import annotations

import orjson

BATCH_TARGET_BYTES = 512 * 1024  # an internal envelope holds items up to this size (one larger item goes alone)
MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # producers' max_request_size: a Work carries a request of up to 1 MiB twice


def encode_batches(works: list) -> list[bytes]:
    """WorkBatch envelopes of at most BATCH_TARGET_BYTES each (each Work encoded once): a stage that takes
    many upstream batches must not emit one message past the broker's size limit."""
    envelopes: list[list[bytes]] = []
    chunk: list[bytes] = []
    size = 0
    for work in works:
        raw = orjson.dumps(work.to_representation())
        if chunk and size + len(raw) > BATCH_TARGET_BYTES:
            envelopes.append(chunk)
            chunk, size = [], 0
        chunk.append(raw)
        size += len(raw) + 1
    if chunk:
        envelopes.append(chunk)
    return [b'{"items":[%s]}' % b",".join(chunk) for chunk in envelopes]
