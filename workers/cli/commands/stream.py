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
        description="Sends a generate request with stream: true to JEV_BROKER through the client library (a "
        "pipeline must be running there: `jev up`) and prints the chunks its tenant's reply topics carry "
        "(jev.tenant.<slug>.chunks.v1), then the decision's totals.",
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
    """Send `body` through the client library (streams/runtime/client.py), call on_chunk(chunk, ms since it was
    sent) per chunk, return the summary."""
    from streams.runtime.client import JevClient, JevError, JevRejected, JevTimeout

    rid = body["request_id"]
    fields = {k: v for k, v in body.items() if k not in ("state", "kind", "stream", "tenant", "service")}
    chunks, first_ms = [], None
    try:
        async with JevClient(body["tenant"], settings=settings, service=body.get("service", "cli")) as jev:
            replies = jev.stream(body["state"], timeout=timeout, **fields)
            sent = time.monotonic()
            async for chunk in replies:
                ms = round((time.monotonic() - sent) * 1000, 1)
                first_ms = ms if first_ms is None else first_ms
                chunks.append(chunk)
                on_chunk(chunk, ms)
            decision = replies.decision
    except JevRejected as exc:
        raise SystemExit(f"jev stream: rejected ({exc.reason}): {exc.detail}") from None
    except JevTimeout:
        raise SystemExit(
            f"jev stream: no decision for {rid} within {timeout:g} s ({len(chunks)} chunks): is a "
            f"pipeline running on {settings.bootstrap}? Start `jev up` (or `jev broker`, `jev worker stream` "
            f"and `jev worker score`), or raise --timeout"
        ) from None
    except JevError as exc:
        raise SystemExit(f"jev stream: {exc}") from None
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
