"""Earliest deadline first. A caller may set a request's `deadline_ms`, counted from its admission; whatever holds
several requests, works or calls serves the nearest deadline first: ingest admits and sends on the requests with a
deadline first, `deadline_first` orders the works of a micro-batch, and `Slots` hands out a model server's call
slots and a scoring worker's turns to decide earliest deadline first, so a checkout screening is not decided after
every batch that arrived before it. Asyncio only: acquire and release on one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math

from schemas.records import Work


def deadline(work: Work) -> float:
    """When the caller stops waiting (epoch seconds; 0 = no deadline): admission plus its deadline_ms."""
    ms = work.request.deadline_ms
    return work.admitted_at + ms / 1000 if ms > 0 else 0.0


def deadline_first(works: list[Work], of=deadline) -> list[list[int]]:
    """The indices of `works` in the parts they are handled in, in that order: those with a deadline (`of`: 0 =
    none), earliest first, then the rest as they came; a part with nothing in it is left out."""
    urgent = sorted((i for i, work in enumerate(works) if of(work)), key=lambda i: of(works[i]))
    rest = [i for i, work in enumerate(works) if not of(work)]
    return [part for part in (urgent, rest) if part]


class Slots:
    """`size` slots; a freed slot goes to the waiter with the earliest deadline (epoch seconds; 0 = none, after
    every deadline), ties in arrival order."""

    def __init__(self, size: int):
        self.size, self.busy = size, 0
        self.waiters: list[tuple[float, int, asyncio.Future]] = []
        self.order = itertools.count()

    def full(self) -> bool:
        return self.busy >= self.size

    async def acquire(self, deadline: float) -> None:
        if not self.full() and not self.waiters:
            self.busy += 1
            return
        future = asyncio.get_running_loop().create_future()
        heapq.heappush(self.waiters, (deadline if deadline > 0 else math.inf, next(self.order), future))
        try:
            await future  # release() handed it a slot
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed a slot as the wait was cancelled: pass it on
                self.release()
            raise

    def release(self) -> None:
        self.busy -= 1
        while self.waiters and not self.full():
            future = heapq.heappop(self.waiters)[2]
            if not future.done():  # a cancelled waiter is skipped
                self.busy += 1
                future.set_result(None)

    @contextlib.asynccontextmanager
    async def hold(self, deadline: float):
        """One slot for the block, queued by `deadline`."""
        await self.acquire(deadline)
        try:
            yield
        finally:
            self.release()
