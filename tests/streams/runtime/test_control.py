"""The control plane holds against bad records and broker restarts: a record a listener cannot take is refused with
a logged reason and the worker goes on; the stage process republishes the control state a restarted local broker
lost (from what it read, and from <data_dir>/control.json when it starts after the restart itself)."""

import asyncio
import logging
import time

from infra.broker import LocalBroker, create_topics
from schemas.records import Control
from schemas.topics import name
from streams.core.switches import Controls
from streams.runtime.control import ControlReader, publish

SWITCH_OFF = Control(kind="switch", key="cache.l2", value=False, ts=100.0)
BUDGET = Control(kind="budget", key="tenant:acme", value={"hard_tokens": 400}, ts=101.0)


def test_a_non_number_tune_record_is_refused_with_its_reason_and_the_rest_applies(app_and_sent, caplog):
    app, _ = app_and_sent
    controls, reader = app.controls, ControlReader("127.0.0.1:9", app.controls)
    caplog.set_level(logging.WARNING, logger="jev.control")
    reader.apply(Control(kind="tune", key="cache.l2.min_similarity", value="high", ts=1.0).dumps())
    assert controls.refused == 1
    assert "refusing control record tune:cache.l2.min_similarity='high'" in caplog.text
    assert "takes a number" in caplog.text
    reader.apply(SWITCH_OFF.dumps())
    assert not controls.on("cache.l2") and controls.refused == 1


def test_cancels_are_events_each_applied_as_read_and_none_kept():
    from streams.core.cancels import Cancels

    controls, cancels = Controls(), Cancels()
    controls.listeners.append(cancels.on_control)
    reader = ControlReader("127.0.0.1:9", controls)
    later = Control(kind="cancel", key="acme", value="r2", ts=time.time())
    earlier = later.derive(value="r1", ts=later.ts - 1)  # another gateway's, stamped a moment before: still a cancel
    for record in (later, earlier):
        reader.apply(record.dumps())
    assert cancels.cancelled("acme", "r1") and cancels.cancelled("acme", "r2")
    assert not reader.known  # never kept nor republished: a stage process's control.json holds state only


async def wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return predicate()


async def fresh_view(bootstrap: str, timeout: float = 15.0) -> Controls:
    """What a process started now reads from the control topic."""
    controls = Controls()
    reader = ControlReader(bootstrap, controls, poll_ms=100)
    following = asyncio.create_task(reader.run())
    await wait_for(lambda: not controls.on("cache.l2") and "tenant:acme" in controls.budgets, timeout)
    reader.stopping.set()
    await following
    return controls


async def test_the_stage_process_republishes_the_control_state_a_restarted_broker_lost(tmp_path):
    kept = tmp_path / "control.json"
    with LocalBroker() as broker:
        bootstrap = broker.url.removeprefix("kafka://")
        await create_topics(bootstrap, [name("control")], 1)
        await publish(bootstrap, [SWITCH_OFF, BUDGET])
        controls = Controls()
        keeper = ControlReader(bootstrap, controls, poll_ms=100, keep=kept, check_s=1.0)
        running = asyncio.create_task(keeper.run())
        assert await wait_for(lambda: "tenant:acme" in controls.budgets and kept.exists(), 15)

        broker.stop()
        broker.start()  # same port, nothing on it: what a restarted local broker holds
        await create_topics(bootstrap, [name("control")], 1)
        after = await fresh_view(bootstrap)
        assert not after.on("cache.l2") and after.budgets["tenant:acme"] == {"hard_tokens": 400}
        keeper.stopping.set()
        await running

        broker.stop()  # and again, with no stage process running: the next one starts from control.json
        broker.start()
        await create_topics(bootstrap, [name("control")], 1)
        assert (await fresh_view(bootstrap, timeout=2)).on("cache.l2")  # the topic is empty now
        started = ControlReader(bootstrap, Controls(), poll_ms=100, keep=kept, check_s=0)
        running = asyncio.create_task(started.run())
        after = await fresh_view(bootstrap)
        assert not after.on("cache.l2") and after.budgets["tenant:acme"] == {"hard_tokens": 400}
        started.stopping.set()
        await running
