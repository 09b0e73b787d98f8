"""Earliest deadline first: a work's deadline, the parts a micro-batch is handled in, and slots (a freed slot's next
holder, cancelled waiters, the block form)."""

import asyncio
import math
import time

from schemas.records import Request, Work
from streams.core.deadlines import Slots, deadline, deadline_first


def work(request_id: str, deadline_ms: int = 0, admitted_at: float = 1000.0) -> Work:
    request = Request.from_data(
        {
            "request_id": request_id,
            "tenant": "acme",
            "service": "payments",
            "decision_type": "risk_interception",
            "state": "x",
            "deadline_ms": deadline_ms,
        }
    )
    return Work(request=request, admitted_at=admitted_at, model="gpt-4o-mini", context="x", context_tokens=1)


def test_a_deadline_counts_from_admission_and_zero_means_none():
    assert deadline(work("a", 300)) == 1000.3 and deadline(work("b")) == 0.0


def test_works_with_a_deadline_come_first_earliest_first_then_the_rest_as_they_came():
    works = [work("p0"), work("late", 300, 1000.0), work("p1"), work("soon", 300, 999.5), work("p2")]
    assert deadline_first(works) == [[3, 1], [0, 2, 4]]
    assert deadline_first([work("p0"), work("p1")]) == [[0, 1]]
    assert deadline_first([work("a", 50), work("b", 20)]) == [[1, 0]]
    assert deadline_first(works, lambda w: 0.0) == [[0, 1, 2, 3, 4]]  # deadlines not honoured: one part
    assert deadline_first([]) == []


def test_a_freed_slot_goes_to_the_earliest_deadline_then_in_arrival_order():
    async def scenario():
        slots, got = Slots(1), []
        await slots.acquire(0.0)
        now = time.time()

        async def wait(name, deadline):
            await slots.acquire(deadline)
            got.append(name)

        tasks = [
            asyncio.create_task(wait(name, d))
            for name, d in [("stream", 0.0), ("late", now + 9), ("soon", now + 1), ("stream2", 0.0)]
        ]
        await asyncio.sleep(0)
        for _ in tasks:
            slots.release()
            await asyncio.sleep(0)
        return got, slots.busy

    got, busy = asyncio.run(scenario())
    assert got == ["soon", "late", "stream", "stream2"] and busy == 1


def test_a_waiter_cancelled_in_the_queue_loses_no_slot():
    async def scenario():
        slots = Slots(1)
        await slots.acquire(0.0)
        gone = asyncio.create_task(slots.acquire(math.inf))
        stays = asyncio.create_task(slots.acquire(0.0))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        slots.release()
        await asyncio.wait_for(stays, 1)
        return slots.busy, len(slots.waiters)

    assert asyncio.run(scenario()) == (1, 0)


def test_hold_releases_the_slot_when_its_block_ends_or_raises():
    async def scenario():
        slots = Slots(1)
        async with slots.hold(0.0):
            assert slots.busy == 1
        try:
            async with slots.hold(time.time() + 1):
                raise ValueError("the block failed")
        except ValueError:
            pass
        return slots.busy

    assert asyncio.run(scenario()) == 0
