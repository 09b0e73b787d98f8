"""`jev chaos`: kill pipeline processes and ClickHouse mid-stream, then prove nothing was lost or doubled."""

from __future__ import annotations

import asyncio

import orjson

ROLES = ("faust", "stage", "scoring")


def register(sub) -> None:
    p = sub.add_parser(
        "chaos",
        help="inject crashes, a ClickHouse outage and hostile input; account for everything",
        description="Runs the local pipeline with the Faust stages in their own process, publishes "
        "N requests plus hostile inputs, SIGKILLs and restarts the processes named by "
        "--kill mid-stream, makes ClickHouse fail for --sink-outage seconds, then checks "
        "that every request got a decision and every usage event is in ClickHouse once. "
        "Exits 1 if anything was lost or double counted. "
        "recovery_s: seconds from a kill to the first decision of the last request that was still undecided "
        "at the kill (in flight or queued; the slowest kill's when there are several, null if one of those "
        "requests was never decided); `kills` has each kill's count of those requests, its recovery_s, "
        "replaced_s (until its replacement was ready) and decided_per_10s (how many of them were decided in "
        "each 10 s after it, where a recovery stalled).",
    )
    p.add_argument("--requests", type=int, default=1000, metavar="N", help="requests to publish (default 1000)")
    p.add_argument(
        "--kill",
        default="",
        metavar="faust,stage,scoring",
        help="processes to SIGKILL and restart mid-stream: faust (the stage process that owns "
        "ClickHouse), stage (the last stage process: with --stages 2 or more, one that does not), "
        "scoring (a scoring worker); comma-separated",
    )
    p.add_argument("--stages", type=int, default=1, metavar="N", help="stage processes (default 1)")
    p.add_argument("--scorers", type=int, default=1, metavar="M", help="scoring workers (default 1)")
    p.add_argument(
        "--sink-outage",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds ClickHouse refuses inserts, starting with the stream (default 0)",
    )
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="give up after S seconds (default 600)")
    p.add_argument("--json", action="store_true", help="print JSON lines, the summary last")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from workers.harness.chaos import run_chaos

    kill = [r.strip() for r in args.kill.split(",") if r.strip()]
    unknown = set(kill) - set(ROLES)
    if unknown:
        print(f"jev chaos: --kill takes {' and/or '.join(ROLES)}, not {', '.join(sorted(unknown))}")
        return 2
    if args.stages < 1 or args.scorers < 1:
        print("jev chaos: --stages and --scorers must be at least 1")
        return 2
    err = Console(stderr=True)
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task("decided + dead-lettered", total=args.requests)
        report = asyncio.run(
            run_chaos(
                settings,
                args.requests,
                kill,
                args.sink_outage,
                args.timeout,
                log=err.print,
                stages=args.stages,
                scorers=args.scorers,
                on_progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
        )
    if args.json:
        print(orjson.dumps(report).decode())
    else:
        from rich.table import Table

        table = Table(title="jev chaos", show_header=False)
        for key, value in report.items():
            table.add_row(key, str(value))
        Console().print(table)
    return 0 if report["lost"] == 0 and report["double_counted"] == 0 and report["decided"] == report["pushed"] else 1
