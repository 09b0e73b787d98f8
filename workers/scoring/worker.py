"""The scoring worker process: pulls micro-batches from the score topic, decides, commits after producing.

At-least-once: offsets are committed only after the decisions and usage events are acknowledged by the
broker; a redelivered batch yields the same request ids and event ids, which downstream treats idempotently.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas.records import UsageBatch, WorkBatch
from schemas.topics import name
from workers.scoring.engine import build_engine

log = logging.getLogger("jev.scoring")


def ready_file(settings) -> Path:
    """Exists while a scoring worker is consuming: the readiness probe for supervisors and the demo."""
    path = Path(settings.data_dir) / f"scoring-{os.getpid()}.ready"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class ScoringWorker:
    def __init__(self, settings, engine=None):
        self.settings = settings
        self.engine = engine or build_engine(settings)
        self.stopping = asyncio.Event()
        self.decided = 0

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            name("score"), bootstrap_servers=s.bootstrap, group_id=f"{s.app_id}-scoring",
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=6000, fetch_max_wait_ms=20,
            heartbeat_interval_ms=1000)
        producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, linger_ms=2, acks="all")
        await consumer.start()
        await producer.start()
        ready_file(s).touch()
        try:
            while not self.stopping.is_set():
                polled = await consumer.getmany(timeout_ms=s.score_batch_wait_ms, max_records=s.score_batch_max)
                if polled:
                    await self.handle(polled, producer)
                    await consumer.commit()
        finally:
            ready_file(s).unlink(missing_ok=True)
            await consumer.stop()
            await producer.stop()

    async def handle(self, polled: dict, producer: AIOKafkaProducer) -> None:
        by_partition = {tp.partition: [w for msg in msgs for w in WorkBatch.loads(msg.value).items]
                        for tp, msgs in polled.items()}
        works = [w for ws in by_partition.values() for w in ws]
        results = await asyncio.to_thread(self.engine.decide_batch, works)
        usage = []
        for work, (decision, events) in zip(works, results):
            work.decision = decision
            usage.extend(events)
        sends = [await producer.send(name("scored"), WorkBatch(items=ws).dumps(), partition=p)
                 for p, ws in by_partition.items() if ws]
        if usage:
            sends.append(await producer.send(name("usage"), UsageBatch(events=usage).dumps()))
        await asyncio.gather(*sends)
        self.decided += len(works)


def main() -> None:
    from streams import settings as settings_mod

    settings = settings_mod.load()
    logging.basicConfig(level=settings.log_level.upper())
    worker = ScoringWorker(settings)

    async def serve():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stopping.set)
        await worker.run()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
