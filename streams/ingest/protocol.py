"""Protocol expansion (PE), one of the efficiency indices: the bytes of a request's prompt as Jev renders it for
the model tiers (the shared context, then each candidate's text) over the bytes of the same content in a compact
encoding (orjson of state, history turns and candidates, no keys repeated per turn). Rendering that adds labels,
markers or pretty-printing pushes PE up; the seed's healthy range is under 1.8."""

from __future__ import annotations

import orjson

from schemas.records import Work


def protocol_bytes(work: Work) -> tuple[int, int]:
    """(bytes as rendered for the model, bytes in the compact encoding) of an admitted, not yet distilled Work."""
    req = work.request
    sent = len(work.context.encode()) + sum(len(c.text.encode()) for c in req.candidates)
    compact = len(
        orjson.dumps([req.state, [[t.role, t.content] for t in req.history], [[c.id, c.text] for c in req.candidates]])
    )
    return sent, compact
