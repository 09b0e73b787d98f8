"""The control plane: kill switches, versions and budgets, latest value per key.

Every process (Faust stages, scoring workers) runs a ControlReader: a group-less consumer that reads the
control topic from the beginning and keeps reading, so a new process starts with the current values and a
change reaches every process within its poll interval, without a restart.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.records import Control
from schemas.topics import name
from streams.kafka_tuning import back_off_when_idle

log = logging.getLogger("jev.control")

# Every protection layer that can be switched off at runtime; all are on unless a control record says off.
SWITCHES = {
    "ingest.truncation": "truncate over-contract input by tokens instead of rejecting it",
    "ingest.budgets": "reserve budget before any model work (off: admit without reserving)",
    "distill.semantic": "tag turns and fold chit-chat/venting/boilerplate into placeholders",
    "distill.time": "weight turns by age (TTL) under the token budget",
    "distill.domain": "drop context chunks matching the decision type's exclusion terms",
    "distill.dedup": "send repeated turns and template text once",
    "cache.l1": "exact cache",
    "cache.l2": "semantic cache",
    "cache.l3": "predictive cache",
    "score.rules": "rules tier (zero tokens)",
    "score.cascade": "coarse-to-fine cascade (off: fine tier scores every candidate)",
    "postprocess.cleanup": "strip preambles, closers, debug markers",
    "postprocess.scan": "sensitive-word scan routing hits to review",
}


class UnknownSwitch(ValueError):
    def __init__(self, switch: str):
        super().__init__(f"unknown switch {switch!r}; switches are: {', '.join(SWITCHES)}")


class Controls:
    """Process-local view of the control topic. Readers call .on(name); writers go through the topic."""

    def __init__(self):
        self.switches: dict[str, bool] = dict.fromkeys(SWITCHES, True)
        self.versions: dict[str, str] = {}
        self.budgets: dict[str, dict] = {}
        self.listeners: list[Callable[[Control], None]] = []
        self.applied = 0

    def on(self, switch: str) -> bool:
        return self.switches[switch]

    def apply(self, control: Control) -> None:
        if control.kind == "switch":
            if control.key not in SWITCHES:
                log.warning("ignoring control for %s", UnknownSwitch(control.key))
                return
            self.switches[control.key] = bool(control.value)
        elif control.kind == "version":
            self.versions[control.key] = str(control.value)
        elif control.kind == "budget":
            self.budgets[control.key] = control.value
        for listener in self.listeners:
            listener(control)
        self.applied += 1


def switch_record(switch: str, on: bool) -> Control:
    if switch not in SWITCHES:
        raise UnknownSwitch(switch)
    return Control(kind="switch", key=switch, value=on, ts=time.time())


async def publish(bootstrap: str, controls: list[Control]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for control in controls:
            await producer.send_and_wait(name("control"), control.dumps(), key=f"{control.kind}:{control.key}".encode())
    finally:
        await producer.stop()


class ControlReader:
    """Follows the control topic from the start; applies each record to `controls`."""

    def __init__(self, bootstrap: str, controls: Controls, poll_ms: int = 200):
        self.bootstrap, self.controls, self.poll_ms = bootstrap, controls, poll_ms
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        consumer = AIOKafkaConsumer(name("control"), bootstrap_servers=self.bootstrap, group_id=None,
                                    auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=50)
        await consumer.start()
        back_off_when_idle(consumer)
        try:
            while not self.stopping.is_set():
                for msgs in (await consumer.getmany(timeout_ms=self.poll_ms)).values():
                    for msg in msgs:
                        try:
                            self.controls.apply(Control.loads(msg.value))
                        except Exception as exc:  # a bad control record must not stop the process
                            log.warning("skipping malformed control record at offset %s: %s", msg.offset, exc)
        finally:
            await consumer.stop()
