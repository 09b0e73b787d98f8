"""Slots handed out earliest deadline first: a freed slot's next holder, cancelled waiters, and the block form."""
import asyncio
import math
import time

from streams.slots import Slots


def test_a_freed_slot_goes_to_the_earliest_deadline_then_in_arrival_order():
    async def scenario():
        slots, got = Slots(1), []
        await slots.acquire(0.0)
        now = time.time()

        async def wait(name, deadline):
            await slots.acquire(deadline)
            got.append(name)

        tasks = [asyncio.create_task(wait(name, d)) for name, d in
                 [("stream", 0.0), ("late", now + 9), ("soon", now + 1), ("stream2", 0.0)]]
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
