"""The scoring worker process: reads micro-batches of the score topic (a streams.wire.BatchConsumer), decides the
whole micro-batch together (one backend call per tier round across its requests: streams.scoring.batching),
commits after producing.

At-least-once: offsets are committed only after the decisions and usage events are acknowledged by the
broker; a redelivered batch yields the same request ids and event ids, which downstream treats idempotently.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

from schemas.records import Decision, Rejection, UsageBatch, Work, WorkBatch
from schemas.topics import name
from streams.control import ControlReader
from streams.switches import Controls
from streams.wire import DEAD_LETTER_ORIGINAL_MAX, MAX_MESSAGE_BYTES, BatchConsumer, encode_batches
from workers.lag import export_lag_forever
from streams.scoring.factory import build_engine

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
        self.producer: AIOKafkaProducer | None = None  # started by run()

    async def run(self) -> None:
        s = self.settings
        self.producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, linger_ms=2, acks="all",
                                         max_request_size=MAX_MESSAGE_BYTES)
        consumer = BatchConsumer(s.bootstrap, name("score"), f"{s.app_id}-scoring", self.handle, s.score_batch_max,
                                 s.score_batch_wait_ms)
        controls = Controls()
        controls.switches = self.engine.switches  # the engine reads switch changes live
        follow = asyncio.create_task(ControlReader(s.bootstrap, controls).run())
        lag = asyncio.create_task(export_lag_forever(s.bootstrap))
        await self.producer.start()
        await consumer.start()
        ready_file(s).touch()
        try:
            await consumer.wait(self.stopping.wait())  # until asked to stop, or the consumer crashed
            if consumer.crashed:
                raise RuntimeError(f"the score consumer crashed ({consumer.crash_reason!r}); exiting so that a "
                                   f"supervisor restarts this worker")
        finally:
            follow.cancel()
            lag.cancel()
            ready_file(s).unlink(missing_ok=True)
            await consumer.stop()
            await self.producer.stop()

    async def handle(self, messages: list) -> None:
        """One micro-batch of score envelopes: decided, and the scored envelopes, usage and dead letters
        acknowledged by the broker before it returns (then BatchConsumer commits its offsets)."""
        producer = self.producer
        by_partition: dict[int, list[Work]] = {}
        sends = []
        for msg in messages:
            batch = decode_batch(msg.value)
            if isinstance(batch, Rejection):  # a poison message: dead-lettered, never retried forever
                sends.append(await producer.send(name("rejected"), batch.dumps()))
                continue
            by_partition.setdefault(msg.partition, []).extend(batch.items)
        works = [w for ws in by_partition.values() for w in ws]
        results = await asyncio.to_thread(self.decide_each, works)
        usage = []
        for work, (decision, events) in zip(works, results):
            work.decision = decision
            usage.extend(events)
        sends += [await producer.send(name("scored"), envelope, partition=p)
                  for p, ws in by_partition.items() for envelope in encode_batches(ws)]
        if usage:
            sends.append(await producer.send(name("usage"), UsageBatch(events=usage).dumps()))
        await asyncio.gather(*sends)
        self.decided += len(works)

    def decide_each(self, works: list[Work]) -> list[tuple[Decision, list]]:
        """decide_batch, except that a request the engine fails on gets a fallback decision naming the error
        instead of taking the whole micro-batch (and the worker) down."""
        try:
            return self.engine.decide_batch(works)
        except Exception:
            results = []
            for work in works:
                try:
                    results.extend(self.engine.decide_batch([work]))
                except Exception as exc:
                    log.exception("engine failed on %s", work.request.request_id)
                    results.append((Decision(request_id=work.request.request_id, tier="fallback",
                                             error=f"engine error: {exc}", chain=["fallback:engine-error"]), []))
            return results


def decode_batch(raw: bytes) -> WorkBatch | Rejection:
    try:
        return WorkBatch.loads(raw)  # eager: a malformed nested record raises here
    except Exception as exc:
        detail = f"undecodable WorkBatch: {exc}"
    return Rejection(reason="bad_internal_message", detail=detail, stage="score",
                     original=raw[:DEAD_LETTER_ORIGINAL_MAX].decode("latin-1"), ts=time.time())


def main() -> None:
    from streams import logsafe, settings as settings_mod
    from streams.metrics import start_metrics_server
    from streams.process import freeze_heap

    logsafe.install()
    settings = settings_mod.load()
    logging.basicConfig(level=settings.log_level.upper())
    start_metrics_server(settings)
    worker = ScoringWorker(settings)
    freeze_heap()  # the engine and its models are loaded

    async def serve():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, worker.stopping.set)
        await worker.run()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
