"""The control plane on Kafka: kill switches, versions and budgets, latest value per key.

Every process (the stage process, scoring workers) runs a ControlReader: a group-less consumer that reads the
control topic from the beginning and keeps reading, so a new process starts with the current values and a
change reaches every process within its poll interval, without a restart.
"""
from __future__ import annotations

import asyncio
import logging

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.records import Control
from schemas.topics import name
from streams.kafka_tuning import back_off_when_idle
from streams.switches import Controls

log = logging.getLogger("jev.control")


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
