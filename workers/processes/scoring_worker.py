"""The scoring worker process: reads micro-batches of the score topic (a streams.runtime.consumer.BatchConsumer),
decides the whole micro-batch together (one backend call per tier round across its requests:
streams.scoring.microbatch), and commits once the Sender delivered what it decided.

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

from schemas.records import Decision, Rejection, Work, WorkBatch
from schemas.topics import name
from streams.core.deadletter import dead_letter, forged
from streams.core.deadlines import Slots
from streams.core.metrics import observe_stages, observe_switches, set_gpu_memory
from streams.core.outbox import Outbox
from streams.core.switches import Controls
from streams.ingest.fairness import fair_order
from streams.runtime.consumer import BatchConsumer
from streams.runtime.control import ControlReader
from streams.runtime.sender import Sender
from streams.scoring.factory import build_engine
from streams.scoring.warmup import warm
from streams.security import signing
from streams.shadow import mechanisms
from streams.shadow.tuning import EngineTuning
from workers.analytics.lag import export_lag_forever
from workers.processes.shadow_scoring import ShadowScorer

log = logging.getLogger("jev.scoring")
# Micro-batches handled at once: while one waits on its paced streams, the next ones are decided (offsets are
# still committed in order, each once every batch before it is done: at-least-once).
DEPTH = 8
STREAM_THREADS = 32  # streamed answers generating or waiting on their token bucket at once
# Works decided in one go, the one deciding slot held: a batch with a deadline that arrives meanwhile waits for one
# chunk at most, not for the whole of a large batch (one backend call per tier round still covers a chunk)
DECIDE_CHUNK = 16


def ready_file(settings) -> Path:
    """Exists while a scoring worker is consuming: the readiness probe for supervisors and the demo."""
    path = Path(settings.data_dir) / f"scoring-{os.getpid()}.ready"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class ScoringWorker:
    def __init__(self, settings, engine=None):
        self.settings = settings
        if engine is None:  # its own engine is warmed before the worker reads a request (streams/scoring/warmup.py)
            engine = build_engine(settings)
            warm(engine, settings.default_model)
        self.engine = engine
        self.stopping = asyncio.Event()
        self.decided = 0
        self.sender: Sender | None = None  # started by run()
        self.chunks: asyncio.Queue | None = None  # Chunks of streamed answers, from the engine's threads, in order
        self.chunk_sender: asyncio.Task | None = None
        self.chunk_acks: list[asyncio.Future] = []
        self.streams = ThreadPoolExecutor(STREAM_THREADS, thread_name_prefix="jev-stream")  # paced: mostly waiting
        # one batch of plain decisions at a time (the backends are not thread-safe), the batch holding the earliest
        # deadline next: a checkout screening's batch is not decided after every batch that arrived before it
        self.deciding = Slots(1)
        self.shadow = ShadowScorer(settings, self.engine, decode_batch)

    async def run(self) -> None:
        s = self.settings
        signing.configure(s)
        sender = self.sender = Sender(s.bootstrap, s.partitions)
        consumer = BatchConsumer(
            s.bootstrap,
            name("score"),
            f"{s.app_id}-scoring",
            self.handle,
            s.score_batch_max,
            s.score_batch_wait_ms,
            sender=sender,
            depth=DEPTH,
        )
        controls = Controls()
        controls.switches = self.engine.switches  # the engine reads switch changes live
        controls.listeners.append(EngineTuning(self.engine).on_control)
        controls.listeners.append(self.engine.cancels.on_control)  # streams whose caller went away stop
        shadow = self.shadow.consumer(sender)
        controls.listeners.append(lambda _: observe_switches(controls.switches))
        observe_switches(controls.switches)
        follow = asyncio.create_task(ControlReader(s.bootstrap, controls, max_skew_s=s.control_max_skew_s).run())
        lag = asyncio.create_task(export_lag_forever(s.bootstrap, s.lag_export_s))
        gpu = asyncio.create_task(export_gpu_memory_forever(s.lag_export_s))
        await sender.start()
        await consumer.start()
        await shadow.start()
        ready_file(s).touch()
        try:
            await consumer.wait(self.stopping.wait())  # until asked to stop, or the consumer crashed
            if consumer.crashed:
                raise RuntimeError(
                    f"the score consumer crashed ({consumer.crash_reason!r}); exiting so that a "
                    f"supervisor restarts this worker"
                )
        finally:
            follow.cancel()
            lag.cancel()
            gpu.cancel()
            if self.chunk_sender is not None:
                self.chunk_sender.cancel()
            self.streams.shutdown(wait=False, cancel_futures=True)
            ready_file(s).unlink(missing_ok=True)
            await consumer.stop()
            await shadow.stop()
            await sender.stop()

    async def handle(self, messages: list) -> Outbox:
        """One micro-batch of score envelopes decided: the decided works for `scored` (by cache-key partition),
        their usage and the dead letters of envelopes that do not decode. The works whose caller set
        a deadline are decided first (earliest first: Engine.deadline_first), then the rest DECIDE_CHUNK at a time
        in round-robin over their tenants (a tenant's flood of a batch does not hold another's request to its end);
        each chunk's decisions go through the Sender as soon as it is decided. With streamed answers in it, the rest
        of the batch is delivered through the Sender first, and the streamed ones are returned once every chunk of
        theirs is acknowledged."""
        out, works = Outbox(), []
        for msg in messages:
            batch = decode_batch(msg)
            if isinstance(batch, Rejection):  # a poison message: dead-lettered, never retried forever
                out.dead_letters.append(batch)
                continue
            works.extend(batch.items)
        streamed = [w for w in works if w.request.stream and not w.request.candidates]
        plain = [w for w in works if not (w.request.stream and not w.request.candidates)]
        if streamed:
            self.start_chunk_sender()
        # Streamed answers are paced: each decides in its own thread, and the rest of the batch does not wait
        # (nor does shadow work: a stream mostly waits on its token bucket)
        loop = asyncio.get_running_loop()
        began_streams = time.time()
        streams = [loop.run_in_executor(self.streams, self.decide_stream, w) for w in streamed]
        parts = [[plain[i] for i in part] for part in self.engine.deadline_first(plain)]
        urgent = parts.pop(0) if parts and self.engine.deadline(parts[0][0]) else []
        rest = fair_order(parts[0], tenant=lambda w: w.request.tenant, size=lambda w: 1, quantum=1) if parts else []
        chunks = [(urgent, self.engine.deadline(urgent[0]))] if urgent else []
        chunks += [(rest[i : i + DECIDE_CHUNK], 0.0) for i in range(0, len(rest), DECIDE_CHUNK)]
        early = []  # the decisions of every chunk but the last, on their way while the next ones are decided
        with self.shadow.served_batch():
            for i, (chunk, deadline) in enumerate(chunks):  # between two chunks, a batch with a deadline goes first
                async with self.deciding.hold(deadline):
                    began = time.time()  # the start of this chunk's work: before it, its requests were queued
                    results = await asyncio.to_thread(self.decide_each, chunk)
                if i == len(chunks) - 1:
                    decided(out, chunk, results, began)
                else:
                    decided(sent := Outbox(), chunk, results, began)
                    early.append(asyncio.ensure_future(self.sender.deliver(sent)))
        await asyncio.gather(*early)  # delivered before this batch counts as done (at-least-once)
        observe_stages("score", plain)
        if streams:
            await self.sender.deliver(out)  # the plain decisions (and dead letters) go now, not after the streams
            out = Outbox()
            decided(out, streamed, [r for task in streams for r in await task], began_streams)
            observe_stages("score", streamed)
            await self.flush_chunks()  # every chunk of these answers is acknowledged before their decisions go
        self.decided += len(works)
        return out

    def start_chunk_sender(self) -> None:
        """The engine calls its chunk sink from decision threads; one task sends the chunks in that order."""
        if self.chunk_sender is not None:
            return
        loop = asyncio.get_running_loop()
        self.chunks = asyncio.Queue()
        self.engine.chunk_sink = lambda chunk: loop.call_soon_threadsafe(self.chunks.put_nowait, chunk)
        self.chunk_sender = asyncio.create_task(self.send_chunks())

    async def send_chunks(self) -> None:
        """Chunks go out through the Sender as they come (those queued together in one send), keyed by
        request id; their acknowledgements are awaited by flush_chunks."""
        while True:
            chunks = [await self.chunks.get()]
            while not self.chunks.empty():
                chunks.append(self.chunks.get_nowait())
            try:
                self.chunk_acks += await self.sender.send(Outbox(chunks=chunks))
            except Exception as exc:  # failed here: flush_chunks raises it, and the batch is not committed
                failed = asyncio.get_running_loop().create_future()
                failed.set_exception(exc)
                self.chunk_acks.append(failed)
            finally:
                for _ in chunks:
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
        instead of taking the whole micro-batch (and the worker) down. Never beside the shadow side's naive engine,
        which shares the models."""
        with self.shadow.deciding:
            return self.decide_guarded(works)

    def decide_stream(self, work: Work) -> list[tuple[Decision, list]]:
        """One streamed answer, in its own thread and without the shadow lock: a stream would hold it for as long
        as it is paced, and it uses the generator, not the scoring backends the lock keeps to one thread."""
        return self.decide_guarded([work])

    def decide_guarded(self, works: list[Work]) -> list[tuple[Decision, list]]:
        try:
            return self.engine.decide_batch(works)
        except Exception:
            results = []
            for work in works:
                try:
                    results.extend(self.engine.decide_batch([work]))
                except Exception as exc:
                    log.exception("engine failed on %s", work.request.request_id)
                    results.append(
                        (
                            Decision(
                                request_id=work.request.request_id,
                                tier="fallback",
                                error=f"engine error: {exc}",
                                chain=["fallback:engine-error"],
                            ),
                            [],
                        )
                    )
            return results


def decided(out: Outbox, works: list[Work], results: list[tuple[Decision, list]], began: float) -> None:
    """Each work with its decision (queued from admission until `began`, when its batch's work started), for
    `scored` (by cache-key partition, as they came), and its usage."""
    for work, (decision, events) in zip(works, results):
        decision.queue_ms = round(max(0.0, began - work.admitted_at) * 1000, 3)
        work.decision = decision
        out.usage.extend(events)
        if work.shadow == "served":
            work.mechanisms = mechanisms.merged(work.mechanisms, mechanisms.from_usage(events))
    out.send_work("scored", works)


async def export_gpu_memory_forever(interval_s: float) -> None:
    """MU, GPU memory utilisation, of each GPU this worker sees (jev_gpu_memory_utilization): the share of the
    device's memory in use, from the driver (what vLLM or a torch model holds, and anything else on it).
    Nothing where torch or a GPU is absent."""
    import sys

    torch = sys.modules.get("torch")  # only a backend that loaded torch can be on a GPU
    if torch is None or not torch.cuda.is_available():
        return
    while True:
        for device in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(device)
            set_gpu_memory(f"cuda:{device}", 1 - free / total)
        await asyncio.sleep(interval_s)


def decode_batch(message) -> WorkBatch | Rejection:
    """The WorkBatch of a consumed score or shadow message, or its dead letter: forged_record where Jev did not
    write it (streams.security.signing: it would be scored and billed to whichever tenant it names, with no
    ingest, budget or tenant-key check), bad_internal_message where it does not decode."""
    if reason := signing.check(message):
        return forged(message, reason)
    try:
        return WorkBatch.loads(message.value)  # eager: a malformed nested record raises here
    except Exception as exc:
        return dead_letter("bad_internal_message", f"undecodable WorkBatch: {exc}", "score", message.value or b"")


def main() -> None:
    from streams import settings as settings_mod
    from streams.core.metrics import start_metrics_server
    from streams.core.process import freeze_heap
    from streams.security import logsafe

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
