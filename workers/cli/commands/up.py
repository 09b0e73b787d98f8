"""`jev up`: the local stack, kept running until Ctrl-C, so a service can call Jev (the client library over Kafka,
or the gateway over HTTP) instead of the demo's replayed workload.

It starts what `jev demo` starts (workers/harness/pipeline.py: the local broker, the stage process that owns the
embedded ClickHouse, a scoring worker), the model server where it is built (`make model-server`), and the HTTP
gateway (workers/processes/gateway.py), prints where each listens, and is ready when the gateway's GET /health
answers 200. Everything lives in memory and under JEV_DATA_DIR/pipeline, started afresh each time."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from pathlib import Path

import orjson

READY_LINE = "jev up: ready"


def register(sub) -> None:
    p = sub.add_parser(
        "up",
        help="start the local stack (broker, stages, scoring worker, model server, gateway) until Ctrl-C",
        description="Starts the local stack and keeps it running until Ctrl-C (or SIGTERM): the Kafka-protocol "
        "broker, the stage process (ingest, distill, cache, postprocess, usage into the embedded ClickHouse), a "
        "scoring worker, the llama.cpp model server where `make model-server` built it (generate requests are "
        "answered by SmolLM2-135M; without it by the extractive generator), and the OpenAI-compatible HTTP "
        "gateway. It prints where each listens, then 'jev up: ready' once the gateway's GET /health answers "
        "200.\n\nCall it from your code:\n"
        "  Kafka:  async with JevClient('acme', settings=load().replace(broker=BROKER)) as jev: "
        "await jev.decide(...)  (streams/runtime/client.py)\n"
        "  HTTP:   jev gateway keys add --tenant acme, then the openai SDK with "
        "base_url=http://127.0.0.1:PORT/v1 and that key",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--gateway-port", type=int, default=8080, help="the gateway's HTTP port (default 8080)")
    p.add_argument("--gateway-host", default="127.0.0.1", help="the address the gateway binds (default 127.0.0.1)")
    p.add_argument("--no-gateway", action="store_true", help="start no gateway: Kafka clients only")
    p.add_argument(
        "--no-model-server",
        action="store_true",
        help="do not start the local model server even where it is built (generate: the extractive generator)",
    )
    p.add_argument("--scorers", type=int, default=1, help="scoring workers (default 1)")
    p.add_argument("--json", action="store_true", help="print where each part listens as one JSON line")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    if not 1 <= args.gateway_port <= 65535:
        print(f"jev up: --gateway-port must be a port from 1 to 65535, got {args.gateway_port}", file=sys.stderr)
        return 2
    if args.scorers < 1:
        print("jev up: --scorers must be at least 1", file=sys.stderr)
        return 2
    model_url = ""
    if not args.no_model_server:
        from infra.model_server import idle_cores, missing, server_for

        why = missing()
        if why:
            print(
                f"jev up: no model server ({why}); generate answers come from the extractive generator", file=sys.stderr
            )
        else:
            log = Path(settings.data_dir) / "model_server.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with server_for("llama", log=log, threads=idle_cores()) as server:
                from workers.harness.demo import served_settings

                return serve(args, served_settings(settings, server.url), server.url)
    return serve(args, settings, model_url)


def serve(args, settings, model_url: str) -> int:
    try:
        asyncio.run(up(args, settings, model_url))
    except OSError as exc:  # the gateway's port taken, most often
        print(f"jev up: {exc}: choose another --gateway-port", file=sys.stderr)
        return 1
    return 0


async def up(args, settings, model_url: str) -> None:
    """Start the stack, print where it listens and wait for SIGINT or SIGTERM; stop it all then."""
    from workers.harness.pipeline import Pipeline, known_decision_types

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    began = time.monotonic()
    pipe = Pipeline(settings, known_decision_types(settings.decision_types), stages_process=True, scorers=args.scorers)
    pipe.root.mkdir(parents=True, exist_ok=True)
    async with pipe:
        runner = None
        where = {
            "broker": pipe.settings.broker,
            "clickhouse": pipe.settings.clickhouse,
            "data_dir": pipe.settings.data_dir,
            "model_server": model_url,
            "gateway": "",
        }
        try:
            if not args.no_gateway:
                from workers.processes import gateway

                runner = await gateway.start(pipe.settings, host=args.gateway_host, port=args.gateway_port)
                where["gateway"] = f"http://{args.gateway_host}:{args.gateway_port}"
                await healthy(where["gateway"] + "/health")
            where["ready_s"] = round(time.monotonic() - began, 1)
            if args.json:
                print(orjson.dumps(where).decode(), flush=True)
            else:
                for part, at in where.items():
                    if at != "":
                        print(f"  {part:<13} {at}", flush=True)
                print(f"  (JEV_BROKER={pipe.settings.broker} points a JevClient or `jev stream` here)", flush=True)
            print(f"{READY_LINE} (Ctrl-C stops it)", flush=True)
            await stop.wait()
        finally:
            print("jev up: stopping", file=sys.stderr, flush=True)
            if runner is not None:
                await runner.cleanup()


async def healthy(url: str, timeout: float = 60.0) -> None:
    """Wait until GET `url` answers 200 (RuntimeError naming the last answer after `timeout`)."""
    import aiohttp

    deadline, last = time.monotonic() + timeout, "no answer"
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as reply:
                    if reply.status == 200:
                        return
                    last = f"HTTP {reply.status}: {(await reply.text())[:200]}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = repr(exc)
            await asyncio.sleep(0.2)
    raise RuntimeError(f"the gateway's {url} did not answer 200 within {timeout:g} s ({last})")
