"""Sandboxes paused while the pipeline is busy, and still given a minimum share of the time."""

from __future__ import annotations

import signal
import subprocess
import threading


class Pauser:
    """Running sandboxes, paused (SIGSTOP) while the pipeline has requests in flight and resumed (SIGCONT) when
    it has none: `in_flight` (streams.core.inflight.InFlight) tells when. Even in the idle CPU class a sandbox slowed
    decisions on a 2-core machine (its memory and caches, and the host's view of a busy CPU); stopped, it
    takes nothing. A paused sandbox's clock runs on: its query limit is wall time.

    A pipeline that is never idle would starve every query until its time limit: so while paused, the
    sandboxes still run `min_share` of each `period_s` (JEV_QUERY_MIN_SHARE), a slice at the end of the period."""

    def __init__(self, in_flight, min_share: float = 0.0, period_s: float = 1.0):
        if not 0 <= min_share < 1:
            raise ValueError(f"min share must be in [0, 1), got {min_share}: set JEV_QUERY_MIN_SHARE")
        self.in_flight, self.procs, self.paused, self.stopped = in_flight, set(), False, False
        self.min_share, self.period_s = min_share, period_s
        self.lock = threading.Lock()
        self.closed = threading.Event()
        in_flight.subscribe(self.on_change)
        if min_share > 0:
            threading.Thread(target=self._slices, daemon=True, name="jev-sandbox-slices").start()

    def on_change(self, busy: bool) -> None:
        with self.lock:
            self.paused = busy
            self._stop(busy)

    def _stop(self, stop: bool) -> None:
        """Stop or resume every sandbox (the caller holds the lock)."""
        if stop != self.stopped:
            self.stopped = stop
            for proc in self.procs:
                proc.send_signal(signal.SIGSTOP if stop else signal.SIGCONT)

    def _slices(self) -> None:
        while not self.closed.wait(self.period_s * (1 - self.min_share)):
            with self.lock:
                if not (self.paused and self.procs):
                    continue
                self._stop(False)
            if self.closed.wait(self.period_s * self.min_share):
                return
            with self.lock:
                self._stop(self.paused)
            self.in_flight.busy()  # holds that expired while nothing looked end here

    def add(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.add(proc)
            if self.stopped:
                proc.send_signal(signal.SIGSTOP)
        self.in_flight.busy()  # holds that expired while nothing looked end here

    def remove(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.procs.discard(proc)

    def close(self) -> None:
        self.closed.set()
        self.in_flight.unsubscribe(self.on_change)
        self.on_change(False)
