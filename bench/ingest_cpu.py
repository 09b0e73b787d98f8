"""CPU per request of the stage process's hot path, in-process: ingest's micro-batch handler on requests the rules
tier answers (decode, validate, count, budgets, distill, the local answer, postprocess, usage, encoding), with a
producer that acknowledges at once, so no broker or other process shares the measure. It finds the send path and
handler by name, so it also runs in older checkouts (bench/before_after.py).
Last stdout line: {requests, cpu_us_per_request, producer_calls}.

    .venv/bin/python bench/ingest_cpu.py [--batches 21] [--size 500]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import orjson
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from schemas.topics import name
from streams import settings as settings_mod
from streams.runtime.app import create_app


class Batch:
    def append(self, **fields):
        return object()


class AcceptingProducer:
    """aiokafka's producer surface the stages use; every send is acknowledged at once."""

    def __init__(self):
        self.calls = 0

    def acknowledged(self) -> asyncio.Future:
        self.calls += 1
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    async def send(self, topic, value=None, key=None, partition=None, headers=None):
        return self.acknowledged()

    def create_batch(self):
        return Batch()

    async def send_batch(self, batch, topic, partition=None):
        return self.acknowledged()

    async def partitions_for(self, topic):
        return set(range(4))


def request(i: int) -> bytes:
    return orjson.dumps(
        {
            "request_id": f"x{i}",
            "tenant": "acme",
            "service": "pay",
            "decision_type": "risk_interception",
            "state": {"risk_score": 0.99, "amount": 5000, "note": "card present"},
            "history": [
                {"role": "user", "content": "Please check this payment, it looks odd."},
                {"role": "assistant", "content": "Checking the card history now"},
            ],
            "candidates": [{"id": "allow", "text": "allow"}, {"id": "block", "text": "block"}],
        }
    )


def messages(values: list[bytes]) -> list:
    return [
        ConsumerRecord(
            topic=name("requests"),
            partition=0,
            offset=i,
            timestamp=0,
            timestamp_type=0,
            key=None,
            value=v,
            checksum=None,
            serialized_key_size=0,
            serialized_value_size=len(v),
            headers=(),
        )
        for i, v in enumerate(values)
    ]


async def measure(batches: int, size: int) -> dict:
    settings = settings_mod.load().replace(
        broker="kafka://127.0.0.1:9", data_dir=tempfile.mkdtemp(), cache_embedder="hashing"
    )
    wired = create_app(settings, {"ranking", "risk_interception"}, sink=object())
    producer = AcceptingProducer()
    if hasattr(wired, "faust"):  # a typed handle (JevApp)
        app, sending, ingest = wired.faust, wired.sender, wired.ingest
    else:  # an older checkout's Faust app, the wiring hung on it
        app, ingest = wired, wired.jev_ingest
        sending = getattr(app, "jev_sender", None) or app.jev_topics.records

    async def started(*tenant):
        return None

    # no broker: nothing to start, and each tenant's reply topics taken as made (the sender creates them on a
    # tenant's first reply; creating them here would wait for a broker forever)
    sending.producer, sending.maybe_start, sending.tenant_ready = producer, started, started
    distilled = name("distilled")
    app.assignor.assigned_actives = lambda: {TP(distilled, p) for p in range(settings.partitions)}
    handle = getattr(ingest, "hand_over", None) or ingest.handle
    work = [messages([request(b * size + i) for i in range(size)]) for b in range(batches)]
    await handle(work[0])  # warm: tokenizer, caches
    cpu = time.process_time()
    for batch in work[1:]:
        await handle(batch)
    used = time.process_time() - cpu
    count = (batches - 1) * size
    return {"requests": count, "cpu_us_per_request": round(used / count * 1e6, 1), "producer_calls": producer.calls}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=21, help="micro-batches, the first one a warm-up")
    p.add_argument("--size", type=int, default=500, help="requests per micro-batch")
    args = p.parse_args()
    if args.batches < 2 or args.size < 1:
        p.error("--batches must be at least 2 (the first warms up) and --size at least 1")
    print(orjson.dumps(asyncio.run(measure(args.batches, args.size))).decode())


if __name__ == "__main__":
    main()
