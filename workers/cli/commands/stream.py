"""`jev stream "QUESTION"`: publish one streaming generate request to a running pipeline and print its chunks
as they arrive, then the decision's totals and the time to the first chunk."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "stream",
        help="ask one question as a streamed answer and print its chunks as they arrive",
        description="Publishes a generate request with stream: true to JEV_BROKER (a pipeline must "
        "be running there: `jev broker`, `jev worker stream`, `jev worker score`) and "
        "follows jev.chunks.v1 for its chunks, then jev.decisions.v1 for the totals.",
    )
    p.add_argument("question")
    p.add_argument(
        "--type",
        dest="question_type",
        default="",
        help="question type from stream.yaml (fact, factual, creative); default: classified by rules",
    )
    p.add_argument("--client", default="", help="web (64-token chunks) or mobile (32); default web")
    p.add_argument("--decision-type", default="customer_service", help="a configured decision type")
    p.add_argument("--tenant", default="acme")
    p.add_argument(
        "--max-output-tokens",
        type=int,
        default=512,
        help="the contract's ceiling; the question type's length applies below it (default 512)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer (default 60)")
    p.add_argument("--json", action="store_true", help="print each chunk, then the summary, as JSON lines")
    p.set_defaults(func=run)


def request(args) -> dict:
    body = {
        "request_id": f"stream-{uuid.uuid4().hex[:12]}",
        "tenant": args.tenant,
        "service": "cli",
        "decision_type": args.decision_type,
        "kind": "generate",
        "stream": True,
        "state": args.question,
        "contracts": {"max_output_tokens": args.max_output_tokens},
        "created_at": time.time(),
    }
    if args.question_type:
        body["question_type"] = args.question_type
    if args.client:
        body["client"] = args.client
    return body


async def follow(settings, body: dict, timeout: float, on_chunk) -> dict:
    """Publish `body`, call on_chunk(chunk, ms since publish) per chunk, return the summary."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    from schemas.records import Chunk, Decision, Rejection
    from schemas.topics import name
    from streams.runtime.partitioning import partition_for

    rid = body["request_id"]
    part = partition_for(rid, settings.partitions)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap, group_id=None, auto_offset_reset="earliest", fetch_max_wait_ms=10
    )  # chunks shown as they land, not per fetch wait
    await consumer.start()
    wanted = [TopicPartition(name(t), part) for t in ("chunks", "decisions", "rejected")]
    consumer.assign(wanted)
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    try:
        sent = time.monotonic()
        await producer.send_and_wait(name("requests"), orjson.dumps(body), key=rid.encode())
        chunks, decision, first_ms, seen = [], None, None, set()
        deadline = sent + timeout
        while decision is None and time.monotonic() < deadline:
            for tp, msgs in (await consumer.getmany(*wanted, timeout_ms=100)).items():
                for msg in msgs:
                    if tp.topic == name("rejected"):
                        rejection = Rejection.loads(msg.value)
                        if rejection.request_id == rid:
                            raise SystemExit(f"jev stream: rejected ({rejection.reason}): {rejection.detail}")
                        continue
                    if tp.topic == name("decisions"):
                        if (d := Decision.loads(msg.value)).request_id == rid:
                            decision = d
                        continue
                    chunk = Chunk.loads(msg.value)
                    if chunk.request_id != rid or chunk.seq in seen:
                        continue
                    seen.add(chunk.seq)
                    ms = round((time.monotonic() - sent) * 1000, 1)
                    first_ms = ms if first_ms is None else first_ms
                    chunks.append(chunk)
                    on_chunk(chunk, ms)
        if decision is None:
            raise SystemExit(
                f"jev stream: no decision for {rid} within {timeout:g} s ({len(chunks)} chunks): is a "
                f"pipeline running on {settings.bootstrap}? Start `jev broker`, `jev worker stream` "
                f"and `jev worker score`, or raise --timeout"
            )
    finally:
        await producer.stop()
        await consumer.stop()
    return {
        "request_id": rid,
        "chunks": len(chunks),
        "tokens": sum(c.tokens for c in chunks),
        "first_chunk_ms": first_ms,
        "total_ms": round((time.monotonic() - sent) * 1000, 1),
        "tier": decision.tier,
        "output_tokens": decision.output_tokens,
        "chain": decision.chain,
        "error": decision.error,
    }


def run(args, settings) -> int:
    def show(chunk, ms):
        if args.json:
            print(orjson.dumps({**chunk.to_representation(), "ms": ms}).decode(), flush=True)
        else:
            print(
                f"[{ms:8.1f} ms  #{chunk.seq:<3} {chunk.progress:3d}%{'  final' if chunk.final else ''}] {chunk.text}",
                flush=True,
            )

    summary = asyncio.run(follow(settings, request(args), args.timeout, show))
    if args.json:
        print(orjson.dumps(summary).decode())
    else:
        print(
            f"{summary['chunks']} chunks, {summary['tokens']} tokens; first chunk after {summary['first_chunk_ms']} "
            f"ms, done after {summary['total_ms']} ms; answered by {summary['tier']} ({', '.join(summary['chain'])})",
            file=sys.stderr,
        )
    return 0 if not summary["error"] else 1
