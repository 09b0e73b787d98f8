"""`jev batch submit FILE.jsonl [--wait]` and `jev batch status ID`: async batch jobs (merged generation)."""

from __future__ import annotations

import asyncio
import sys

import orjson

COLUMNS = ("member", "kind", "status", "sent", "retried", "label", "quota used", "individual", "trimmed")


def register(sub) -> None:
    p = sub.add_parser("batch", help="submit async batch jobs (merged generation under per-member quotas)")
    cmds = p.add_subparsers(dest="batch_command", metavar="ACTION", required=True)
    s = cmds.add_parser(
        "submit",
        help="publish a job file (JSONL, one member per line) to the batch topic",
        description="Each line: {job, member, kind, template, quota_tokens, variables}. Without a "
        "broker at JEV_BROKER, starts the local pipeline and waits for the results.",
    )
    s.add_argument("file", help="job file (JSONL)")
    s.add_argument("--wait", action="store_true", help="wait for every member's result and print the job report")
    s.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for results (default 900)")
    s.add_argument("--generator", help="generator for a locally started pipeline (overrides JEV_GENERATOR)")
    s.add_argument("--json", action="store_true", help="one JSON line per member result, then the report")
    s.set_defaults(func=run_submit)
    st = cmds.add_parser("status", help="where a job stands: members submitted, results, failures")
    st.add_argument("job", help="job id")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=run_status)


def run_submit(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    from streams.runtime.client import JevError
    from workers.cli import batch_runner as runner

    err = Console(stderr=True)
    if args.generator:
        settings = settings.replace(generator=args.generator)
    try:
        members = runner.read_job(args.file)
    except (runner.JobFileError, OSError) as exc:
        err.print(f"[red]{exc}[/red]")
        return 2
    local = not runner.broker_reachable(settings.bootstrap)
    if local:
        err.print(
            f"no broker at {settings.broker}: starting the local pipeline for this job (generator {settings.generator})"
        )
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(f"job {members[0].job}", total=len(members))
        on_result = lambda done: progress.update(task, completed=done)  # noqa: E731
        try:
            if local:
                report, results = asyncio.run(runner.run_local(settings, members, args.timeout, on_result))
            else:
                report, results = asyncio.run(runner.submit(settings, members, args.wait, args.timeout, on_result))
        except JevError as exc:  # no results within --timeout, or the client could not start
            err.print(f"[red]jev batch submit: {exc}[/red]")
            return 1
    if report is None:
        print(
            orjson.dumps({"job": members[0].job, "members": len(members), "submitted": True}).decode()
            if args.json
            else f"submitted job {members[0].job}: {len(members)} members"
        )
        return 0
    runner.save_report(settings.data_dir, members[0].job, report, results)
    show(report, results, args.json)
    return 0 if report["failed"] == 0 and report["pending"] == 0 else 1


def run_status(args, settings) -> int:
    from streams.batch.report import summarize
    from workers.cli import batch_runner as runner

    if runner.broker_reachable(settings.bootstrap):
        submitted, found = asyncio.run(runner.read_topics(settings.bootstrap, args.job, None, 30.0))
        if submitted or found:
            results = list(found.values())
            report = summarize(args.job, results, len(submitted | set(found)), settings.default_model)
            show(report, results, args.json)
            return 0
    saved = runner.saved_report(settings.data_dir, args.job)
    if saved is None:
        print(
            f"job {args.job!r}: not on the broker at {settings.broker} and no saved report under "
            f"{settings.data_dir}/batch (submit it with --wait to keep one)",
            file=sys.stderr,
        )
        return 1
    from schemas.batch import BatchResult

    show(saved["report"], [BatchResult.from_data(r) for r in saved["results"]], args.json)
    return 0


def show(report: dict, results: list, as_json: bool) -> None:
    if as_json:
        for r in results:
            print(orjson.dumps(r.asdict()).decode())
        print(orjson.dumps(report).decode())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(*COLUMNS, title=f"job {report['job']}")
    for r in results:
        table.add_row(
            r.member,
            r.kind,
            r.status,
            r.sent,
            "yes" if r.retried else "",
            r.label,
            f"{r.quota_used}/{r.quota_tokens}",
            str(r.individual_tokens),
            ", ".join(r.trimmed),
        )
    console = Console()
    console.print(table)
    for r in results:
        if r.error:
            console.print(f"[red]{r.member}: {r.error}[/red]")
        elif r.note:
            console.print(f"{r.member}: {r.note}")
    summary = Table(show_header=False, title="report")
    for key, value in report.items():
        summary.add_row(key, str(value))
    console.print(summary)
