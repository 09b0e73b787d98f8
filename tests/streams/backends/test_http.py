"""The model-server transport: the slots calls queue for, the circuit's states and the usage forms servers send."""
import asyncio
import math
import time

from streams.backends.http import Breaker, Slots, usage_of
from streams.backends.protocol import Usage


def test_breaker_half_open_allows_one_trial_at_a_time():
    b = Breaker(failures=2, cooldown_s=1.0)
    b.failure(0.0), b.failure(0.0)
    assert not b.allow(0.5) and b.allow(1.5) and not b.allow(1.6)
    b.success()
    assert b.allow(1.7) and not b.open


def test_usage_of_reads_the_forms_servers_send():
    assert usage_of({"usage": {"total_tokens": 9}}) == Usage(9, 0, 0)
    assert usage_of({"usage": None}) is None and usage_of({"usage": {"prompt_tokens": "x"}}) is None


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
