"""The scoring worker process: reads micro-batches of the score topic (a streams.consumer.BatchConsumer), decides
the whole micro-batch together (one backend call per tier round across its requests: streams.scoring.batching),
and commits once the Sender delivered what it decided.

At-least-once: offsets are committed only after the decisions and usage events are acknowledged by the
broker; a redelivered batch yields the same request ids and event ids, which downstream treats idempotently.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from schemas.records import Decision, Rejection, Work, WorkBatch
from schemas.topics import name
from streams.control import ControlReader
from streams.metrics import observe_stages, observe_switches, set_gpu_memory
from streams.deadletter import dead_letter
from streams.switches import Controls
from streams.consumer import BatchConsumer
from streams.outbox import Outbox
from streams.sender import Sender
from workers.lag import export_lag_forever
from streams.scoring.factory import build_engine
from streams.shadow import mechanisms
from streams.shadow.tuning import EngineTuning
from workers.shadow_scoring import ShadowScorer

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
        self.shadow = ShadowScorer(settings, self.engine, decode_batch)

    async def run(self) -> None:
        s = self.settings
        sender = Sender(s.bootstrap, s.partitions)
        consumer = BatchConsumer(s.bootstrap, name("score"), f"{s.app_id}-scoring", self.handle, s.score_batch_max,
                                 s.score_batch_wait_ms, sender=sender)
        controls = Controls()
        controls.switches = self.engine.switches  # the engine reads switch changes live
        controls.listeners.append(EngineTuning(self.engine).on_control)
        shadow = self.shadow.consumer(sender)
        controls.listeners.append(lambda _: observe_switches(controls.switches))
        observe_switches(controls.switches)
        follow = asyncio.create_task(ControlReader(s.bootstrap, controls).run())
        lag = asyncio.create_task(export_lag_forever(s.bootstrap, s.lag_export_s))
        gpu = asyncio.create_task(export_gpu_memory_forever(s.lag_export_s))
        await sender.start()
        await consumer.start()
        await shadow.start()
        ready_file(s).touch()
        try:
            await consumer.wait(self.stopping.wait())  # until asked to stop, or the consumer crashed
            if consumer.crashed:
                raise RuntimeError(f"the score consumer crashed ({consumer.crash_reason!r}); exiting so that a "
                                   f"supervisor restarts this worker")
        finally:
            follow.cancel()
            lag.cancel()
            gpu.cancel()
            ready_file(s).unlink(missing_ok=True)
            await consumer.stop()
            await shadow.stop()
            await sender.stop()

    async def handle(self, messages: list) -> Outbox:
        """One micro-batch of score envelopes decided: the decided works for `scored` (by cache-key partition,
        as they came), their usage and the dead letters of envelopes that do not decode."""
        out, works = Outbox(), []
        for msg in messages:
            batch = decode_batch(msg.value)
            if isinstance(batch, Rejection):  # a poison message: dead-lettered, never retried forever
                out.dead_letters.append(batch)
                continue
            works.extend(batch.items)
        with self.shadow.served_batch():
            results = await asyncio.to_thread(self.decide_each, works)
        observe_stages("score", works)
        for work, (decision, events) in zip(works, results):
            work.decision = decision
            out.usage.extend(events)
            if work.shadow == "served":
                work.mechanisms = mechanisms.merged(work.mechanisms, mechanisms.from_usage(events))
        self.decided += len(works)
        return out.send_work("scored", works)

    def decide_each(self, works: list[Work]) -> list[tuple[Decision, list]]:
        """decide_batch, except that a request the engine fails on gets a fallback decision naming the error
        instead of taking the whole micro-batch (and the worker) down. Never beside the shadow side's naive engine,
        which shares the models."""
        with self.shadow.deciding:
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


def decode_batch(raw: bytes) -> WorkBatch | Rejection:
    try:
        return WorkBatch.loads(raw)  # eager: a malformed nested record raises here
    except Exception as exc:
        return dead_letter("bad_internal_message", f"undecodable WorkBatch: {exc}", "score", raw)


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
