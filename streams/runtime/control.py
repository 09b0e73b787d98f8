"""The control plane on Kafka: kill switches, versions and budgets, latest value per key.

Every process runs a ControlReader: a group-less consumer that reads the control topic from the beginning and
keeps reading, so a new process starts with the current values and a change reaches every process without a
restart. The stage process also keeps the newest record per key (<data_dir>/control.json) and publishes again what
the topic lacks every JEV_CONTROL_CHECK_S, since a restarted local broker has lost every record.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

from schemas.records import Control
from schemas.topics import name
from streams.core import cancels
from streams.core.switches import Controls
from streams.runtime.consumer import follow_from_start
from streams.security import signing

log = logging.getLogger("jev.control")


async def publish(bootstrap: str, controls: list[Control]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for control in controls:
            await send(producer, control)
    finally:
        await producer.stop()


async def send(producer, control: Control) -> None:
    """One control record, signed by this process's keyring, on a started producer."""
    value = control.dumps()
    await producer.send_and_wait(
        name("control"), value, key=record_key(control).encode(), headers=signing.headers(name("control"), value)
    )


class ControlReader:
    """Follows the control topic from the start; applies each record to `controls`. With `keep` (a file), also
    remembers the newest record per kind and key there and republishes what the topic lost (every `check_s`)."""

    def __init__(
        self,
        bootstrap: str,
        controls: Controls,
        poll_ms: int = 200,
        keep: Path | None = None,
        check_s: float = 30.0,
        max_skew_s: float = 60.0,
    ):
        self.bootstrap, self.controls, self.poll_ms = bootstrap, controls, poll_ms
        self.keep, self.check_s, self.max_skew_s = keep, check_s, max_skew_s
        self.stopping, self.caught_up = asyncio.Event(), asyncio.Event()
        self.known: dict[str, Control] = load_kept(keep, max_skew_s) if keep is not None else {}
        for control in self.known.values():  # in effect until the topic holds newer ones
            controls.apply(control)
        self.saved = dict(self.known)

    async def run(self) -> None:
        keeping = asyncio.ensure_future(self.keep_published()) if self.keep is not None else None
        try:
            await follow_from_start(
                self.bootstrap,
                name("control"),
                self.apply,
                self.stopping,
                self.poll_ms,
                "control record",
                caught_up=self.caught_up.set,
            )
        finally:
            if keeping is not None:
                keeping.cancel()

    def apply(self, value: bytes) -> None:
        """One record of the topic: applied when it is the newest of its kind and key; a record stamped in the
        future is refused (counted as forged), one older than the value in effect is skipped (a replay). A cancel
        is an event, not a value: each is applied as read, and none is kept (streams.core.cancels)."""
        control = Control.loads(value)
        if from_future(control, self.max_skew_s):
            return
        if control.kind == cancels.KIND:
            self.controls.apply(control)
            return
        key = record_key(control)
        if key in self.known and control.ts < self.known[key].ts:
            log.info("skipping control record %s stamped %.0f: %.0f is in effect", key, control.ts, self.known[key].ts)
            return
        self.controls.apply(control)
        self.known[key] = control

    async def keep_published(self) -> None:
        """Once the topic is read, and every `check_s` after: republish what it lacks; save what is known."""
        await self.caught_up.wait()
        while not self.stopping.is_set():
            try:
                await self.republish()
            except Exception as exc:  # the broker is away: the next check tries again
                log.warning("could not check the control topic (%s); trying again in %.0f s", exc, self.check_s)
            if self.keep is not None and self.known != self.saved:
                save_kept(self.keep, self.known)
                self.saved = dict(self.known)
            if self.check_s <= 0:
                return
            await asyncio.sleep(self.check_s)

    async def republish(self) -> list[Control]:
        """Publish every known record the topic lacks or holds only older; returns them."""
        on_topic = await latest_on_topic(self.bootstrap, self.poll_ms, self.max_skew_s)
        lost = [c for key, c in self.known.items() if key not in on_topic or on_topic[key] < c.ts]
        if lost:
            log.warning(
                "the control topic lacked %d control record(s) this process knows (a restarted broker?): "
                "publishing them again: %s",
                len(lost),
                ", ".join(sorted(record_key(c) for c in lost)),
            )
            await publish(self.bootstrap, lost)
        return lost


def record_key(control: Control) -> str:
    return f"{control.kind}:{control.key}"


def from_future(control: Control, max_skew_s: float, count: bool = True) -> bool:
    """Whether `control` is stamped more than `max_skew_s` ahead of this clock: refused, counted as forged."""
    if control.ts <= time.time() + max_skew_s:
        return False
    if count:
        signing.refuse(
            name("control"),
            f"{record_key(control)} stamped {control.ts:.0f}, {control.ts - time.time():.0f} s in the future",
        )
    return True


async def latest_on_topic(bootstrap: str, poll_ms: int = 200, max_skew_s: float = 60.0) -> dict[str, float]:
    """{kind:key: the newest ts} of what the control topic holds now (read from its start to its end; signed
    records stamped no later than `max_skew_s` ahead)."""
    found: dict[str, float] = {}
    stopping = asyncio.Event()

    def note(value: bytes) -> None:
        control = Control.loads(value)
        if from_future(control, max_skew_s, count=False):  # counted when it was read to be applied
            return
        key = record_key(control)
        found[key] = max(found.get(key, control.ts), control.ts)

    await follow_from_start(
        bootstrap,
        name("control"),
        note,
        stopping,
        poll_ms,
        "control record",
        caught_up=stopping.set,
        trusted=signing.quietly_trusted,
    )
    return found


def load_kept(path: Path, max_skew_s: float = 60.0) -> dict[str, Control]:
    """The records a stage process kept (save_kept), but any stamped in the future; none when the file is missing
    or unreadable (logged)."""
    try:
        kept = [Control.from_data(d) for d in orjson.loads(path.read_bytes())]
        return {record_key(c): c for c in kept if not from_future(c, max_skew_s)}
    except FileNotFoundError:
        return {}
    except Exception as exc:
        log.warning("ignoring the kept control state in %s (%s): the control topic alone counts", path, exc)
        return {}


def save_kept(path: Path, known: dict[str, Control]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(orjson.dumps([c.to_representation() for c in known.values()]))
    temporary.replace(path)
