"""Streamed answers whose caller went away. When an HTTP client disconnects mid-stream the gateway publishes a
`cancel` control record (key: the tenant, value: the request id, signed like every control record); each scoring
worker keeps the recent ones here, and its stream loop stops generating and sending an answer named
(streams/scoring/streaming.py) and meters what was generated. A cancel names its tenant: it stops that tenant's
request of that id only, never another tenant's that reuses the id.

Cancels are events, not state: the control topic keeps the newest per tenant (compaction, its key), readers apply
every one they read and keep none (streams/runtime/control.py), and this set holds the last KEEP."""

from __future__ import annotations

import time
from collections import OrderedDict

from schemas.records import Control
from streams.core.tenants import BadTenant, canonical

KIND = "cancel"
KEEP = 4096  # cancels remembered per process: far more than streams in flight at once


def record(tenant: str, request_id: str) -> Control:
    """The control record that cancels `tenant`'s request `request_id`."""
    return Control(kind=KIND, key=canonical(tenant), value=request_id, ts=time.time())


class Cancels:
    """The request ids cancelled lately, per tenant (at most `keep`, the oldest forgotten first). Applied on the
    event loop (a Controls listener), read from the stream threads."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self.named: OrderedDict[tuple[str, str], None] = OrderedDict()

    def on_control(self, control: Control) -> None:
        """Controls listener: a cancel record is remembered; other kinds are not this set's."""
        if control.kind != KIND:
            return
        if not isinstance(control.value, str) or not control.value:
            raise ValueError(f"a cancel's value is the request id it stops, got {control.value!r}")
        named = (canonical(control.key), control.value)
        self.named[named] = None
        self.named.move_to_end(named)
        while len(self.named) > self.keep:
            self.named.popitem(last=False)

    def cancelled(self, tenant: str, request_id: str) -> bool:
        if not self.named:
            return False
        try:
            return (canonical(tenant), request_id) in self.named
        except BadTenant:
            return False
