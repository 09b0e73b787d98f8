"""The control plane on Kafka: kill switches, versions and budgets, latest value per key.

Every process (the stage process, scoring workers) runs a ControlReader: a group-less consumer that reads the
control topic from the beginning and keeps reading, so a new process starts with the current values and a
change reaches every process within its poll interval, without a restart.
"""
from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from schemas.records import Control
from schemas.topics import name
from streams.consumer import follow_from_start
from streams.switches import Controls


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
        await follow_from_start(self.bootstrap, name("control"), self.apply, self.stopping, self.poll_ms,
                                "control record")

    def apply(self, value: bytes) -> None:
        self.controls.apply(Control.loads(value))
