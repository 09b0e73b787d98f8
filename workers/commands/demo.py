"""`jev demo`: run the main job on the embedded default and report what it did."""
from __future__ import annotations

import asyncio
import sys

import orjson


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline locally on a bundled workload and report",
                       description="Starts a local Kafka-protocol broker, the Faust stages, a scoring worker and "
                                   "the embedded ClickHouse; replays N realistic decision requests (plus a few "
                                   "malformed ones) and reports tiers, tokens and latency. Exits 1 if any "
                                   "request got no decision.")
    p.add_argument("--requests", type=int, default=500, metavar="N", help="requests to replay (default 500)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from workers.demo import run_demo

    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress:
        report = asyncio.run(run_demo(settings, args.requests, progress))
    if args.json:
        print(orjson.dumps(report).decode())
    else:
        print_report(report)
    return 0 if report["decided"] == report["requests"] else 1


def print_report(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="jev demo", show_header=False)
    saved = 1 - r["tokens"]["actual"] / r["tokens"]["nominal"] if r["tokens"]["nominal"] else 0.0
    for label, value in [
        ("requests", r["requests"]), ("decided", r["decided"]),
        ("rejected (bad input)", f"{r['rejected']}  {', '.join(r['rejected_reasons'])}"),
        ("decisions by tier", ", ".join(f"{k} {v}" for k, v in r["tiers"].items())),
        ("tokens actual / nominal", f"{r['tokens']['actual']:,} / {r['tokens']['nominal']:,}  ({saved:.1%} saved)"),
        ("cache hits (tokens saved)", ", ".join(f"{k.removeprefix('cache_')} {v['hits']} ({v['tokens_saved']:,})"
                                                 for k, v in r["cache"].items() if isinstance(v, dict)) or "none"),
        ("L3 pre-answer tokens", f"{r['cache']['l3_prefetch_tokens']:,}"),
        ("latency p50 / p95", f"{r['latency_ms']['p50']} ms / {r['latency_ms']['p95']} ms"),
        ("streamed answers", "{requests} ({generated} generated), {chunks} chunks, {tokens:,} tokens, first chunk "
                             "p50 {first_chunk_ms_p50} ms, {tokens_per_s_p50} tokens/s".format(**r["stream"])),
        ("usage rows in ClickHouse", r["clickhouse_rows"]), ("wall time", f"{r['wall_s']} s")]:
        t.add_row(label, str(value))
    console.print(t)
    if r["decided"] < r["requests"]:
        print(f"{r['requests'] - r['decided']} requests got no decision", file=sys.stderr)
