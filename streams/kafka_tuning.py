"""Faust hard-codes fetch_max_wait_ms=1500 for its consumers. Brokers that hold a fetch open for the full
wait even when data arrives (tansu does) then add up to 1.5 s per pipeline hop, so Jev's stages fetch
with a short wait instead: an idle poll costs one cheap round trip, a busy stage pays no wait at all."""
from __future__ import annotations

from faust.transport.drivers import aiokafka as driver

FETCH_MAX_WAIT_MS = 5


class ShortWaitConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport):
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer


def install() -> None:
    driver.Consumer._new_consumer_thread = lambda self: ShortWaitConsumerThread(
        self, loop=self.loop, beacon=self.beacon)
