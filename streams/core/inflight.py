"""The requests this process has sent on for work (to distill's cache stage or the scoring workers) and not yet
decided: the signal the owner's analytics sandboxes yield to (workers/analytics/sandbox/), so a tenant's
heavy query runs only while the pipeline waits on nothing of its own.

The sender records each request it sends on (`hold`) and each decision or dead letter (`release`). A request
holds for at most `hold_s` seconds (one lost on the way, or decided by another process, stops holding then), and
listeners hear `True` when the first request starts holding and `False` when the last stops."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable

WORK_TOPICS = ("distilled", "score")  # hops whose requests end in a decision of this process (not shadow twins)


class InFlight:
    def __init__(self, hold_s: float = 5.0):
        self.hold_s = hold_s
        self.until: collections.OrderedDict[str, float] = collections.OrderedDict()  # in order of expiry
        self.listeners: list[Callable[[bool], None]] = []
        self.lock = threading.Lock()
        self.held = False

    def subscribe(self, listener: Callable[[bool], None]) -> None:
        """`listener(busy)` on each change between no request held and some; called on the caller's thread of
        hold, release or busy, so it must be quick (sending a signal, setting a flag)."""
        with self.lock:
            self.listeners.append(listener)

    def unsubscribe(self, listener: Callable[[bool], None]) -> None:
        with self.lock:
            if listener in self.listeners:
                self.listeners.remove(listener)

    def hold(self, request_ids: Iterable[str], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self.lock:
            for request_id in request_ids:
                self.until.pop(request_id, None)
                self.until[request_id] = now + self.hold_s
            self._changed(now)

    def release(self, request_ids: Iterable[str], now: float | None = None) -> None:
        with self.lock:
            for request_id in request_ids:
                self.until.pop(request_id, None)
            self._changed(time.monotonic() if now is None else now)

    def busy(self, now: float | None = None) -> bool:
        """True while some request is held (expired holds are dropped first)."""
        with self.lock:
            return self._changed(time.monotonic() if now is None else now)

    def _changed(self, now: float) -> bool:
        while self.until and next(iter(self.until.values())) <= now:
            self.until.popitem(last=False)
        held = bool(self.until)
        if held != self.held:
            self.held = held
            for listener in list(self.listeners):
                listener(held)
        return held


IN_FLIGHT = InFlight()  # this process's requests in flight
