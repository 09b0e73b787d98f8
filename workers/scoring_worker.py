"""The scoring worker process: reads micro-batches of the score topic (a streams.wire.BatchConsumer), decides,
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from aiokafka import AIOKafkaProducer

from schemas.records import Decision, Rejection, UsageBatch, Work, WorkBatch
from schemas.topics import name
from streams.control import ControlReader
from streams.switches import Controls
from streams.wire import DEAD_LETTER_ORIGINAL_MAX, MAX_MESSAGE_BYTES, BatchConsumer, encode_batches, partition_for
from workers.lag import export_lag_forever
from streams.scoring.engine import build_engine

log = logging.getLogger("jev.scoring")
# Micro-batches handled at once: while one waits on its paced streams, the next ones are decided (offsets are
# still committed in order, each once every batch before it is done: at-least-once).
DEPTH = 8
STREAM_THREADS = 32  # streamed answers generating or waiting on their token bucket at once


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
        self.chunks: asyncio.Queue | None = None  # Chunks of streamed answers, from the engine's threads, in order
        self.chunk_sender: asyncio.Task | None = None
        self.chunk_acks: list[asyncio.Future] = []
        self.streams = ThreadPoolExecutor(STREAM_THREADS, thread_name_prefix="jev-stream")  # paced: mostly waiting
        self.deciding = asyncio.Lock()  # one batch of plain decisions at a time: the backends are not thread-safe

    async def run(self) -> None:
        s = self.settings
        self.producer = AIOKafkaProducer(bootstrap_servers=s.bootstrap, linger_ms=2, acks="all",
                                         max_request_size=MAX_MESSAGE_BYTES)
        consumer = BatchConsumer(s.bootstrap, name("score"), f"{s.app_id}-scoring", self.handle, s.score_batch_max,
                                 s.score_batch_wait_ms, depth=DEPTH)
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
            if self.chunk_sender is not None:
                self.chunk_sender.cancel()
            self.streams.shutdown(wait=False, cancel_futures=True)
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
        streamed = [w for w in works if w.request.stream and not w.request.candidates]
        if streamed:
            self.start_chunk_sender()
        # Streamed answers are paced: each decides in its own thread, and the rest of the batch does not wait
        loop = asyncio.get_running_loop()
        streams = [loop.run_in_executor(self.streams, self.decide_each, [w]) for w in streamed]
        plain = {id(w) for w in works} - {id(w) for w in streamed}
        async with self.deciding:
            decided = await asyncio.to_thread(self.decide_each, [w for w in works if id(w) in plain])
        await self.send_decided(by_partition, plain, decided, sends)
        if streams:
            results = [r for task in streams for r in await task]
            await self.flush_chunks()  # every chunk of these answers is acknowledged before their decisions go
            await self.send_decided(by_partition, {id(w) for w in streamed}, results, [])
        self.decided += len(works)

    async def send_decided(self, by_partition: dict[int, list[Work]], chosen: set[int], results: list,
                           sends: list) -> None:
        """The decided works of `chosen` (ids of works, in batch order) as scored envelopes by partition, with
        their usage; returns once the broker acknowledged them (and the earlier `sends`)."""
        producer, usage = self.producer, []
        parts = {p: [w for w in ws if id(w) in chosen] for p, ws in by_partition.items()}
        for work, (decision, events) in zip([w for ws in parts.values() for w in ws], results):
            work.decision = decision
            usage.extend(events)
        sends = sends + [await producer.send(name("scored"), envelope, partition=p)
                         for p, ws in parts.items() if ws for envelope in encode_batches(ws)]
        if usage:
            sends.append(await producer.send(name("usage"), UsageBatch(events=usage).dumps()))
        await asyncio.gather(*sends)

    def start_chunk_sender(self) -> None:
        """The engine calls its chunk sink from decision threads; one task sends the chunks in that order."""
        if self.chunk_sender is not None:
            return
        loop = asyncio.get_running_loop()
        self.chunks = asyncio.Queue()
        self.engine.chunk_sink = lambda chunk: loop.call_soon_threadsafe(self.chunks.put_nowait, chunk)
        self.chunk_sender = asyncio.create_task(self.send_chunks())

    async def send_chunks(self) -> None:
        while True:
            chunk = await self.chunks.get()
            try:
                self.chunk_acks.append(await self.producer.send(
                    name("chunks"), chunk.dumps(), key=chunk.request_id.encode(),
                    partition=partition_for(chunk.request_id, self.settings.partitions)))  # as decisions are
            except Exception as exc:  # failed here: flush_chunks raises it, and the batch is not committed
                failed = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                self.chunk_acks.append(failed)
            finally:
                self.chunks.task_done()

    async def flush_chunks(self) -> None:
        """Every chunk released so far is acknowledged by the broker (batches handled at once share the queue)."""
        await self.chunks.join()
        try:
            await asyncio.gather(*self.chunk_acks)
        finally:  # a failed send fails the batches waiting on it (they are read again), not every later one
            self.chunk_acks = [ack for ack in self.chunk_acks if not ack.done()]

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
