"""`jev report`: usage at the four levels (request, session, service, business), as tables, JSON or HTML."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from workers.analytics.levels import BY_SOURCES


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="usage per request, session, service and business event",
        description="Reads the usage tables in ClickHouse (settings.clickhouse; `jev demo` fills "
        "them) and reports the four levels, savings by mechanism, tier shares and "
        "efficiency indices.",
    )
    p.add_argument("--by", choices=list(BY_SOURCES), default="service", help="breakdown dimension (default service)")
    p.add_argument("--since", default="7d", help="window: 90m, 24h, 7d, 2w or all (default 7d)")
    p.add_argument("--tenant", default="", help="only this tenant's rows")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON line per breakdown row, then the report")
    out.add_argument("--html", metavar="OUT.html", help="write an HTML report with plots")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from workers.analytics import owner, report

    try:
        data, _ = owner.answer(settings, "report", {"since": args.since, "by": args.by, "tenant": args.tenant})
    except (ValueError, RuntimeError) as e:
        print(f"jev report: {e}", file=sys.stderr)
        return 2
    data["switches"] = current_switches(settings)
    if args.json:
        for row in data["breakdown"]:
            print(orjson.dumps({"by": args.by, **row}).decode())
        print(orjson.dumps(data).decode())
    elif args.html:
        Path(args.html).write_text(report.render_html(data))
        print(f"wrote {args.html}", file=sys.stderr)
    else:
        print_tables(data)
    return 0


def current_switches(settings, timeout: float = 3.0) -> dict[str, bool] | None:
    """Every kill switch's state as the control topic holds it now; None when no broker answers at JEV_BROKER
    (the report then says the state is unknown rather than guessing "on")."""
    import asyncio
    import socket

    from streams.core.switches import Controls
    from streams.runtime.control import ControlReader

    host, _, port = settings.bootstrap.split(",")[0].rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.3).close()
    except (OSError, ValueError):
        return None
    controls = Controls()

    async def read_once():
        reader = ControlReader(settings.bootstrap, controls, poll_ms=200)
        task = asyncio.create_task(reader.run())
        await asyncio.sleep(1.0)
        reader.stopping.set()
        await asyncio.wait_for(task, timeout)

    try:
        asyncio.run(read_once())
    except (TimeoutError, OSError):
        return None
    return controls.switches


def print_tables(data: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from workers.analytics import numbers

    console = Console()
    t = data["totals"]
    if data.get("empty"):
        console.print(f"[bold]no usage in the window[/]: {data['empty']}")
    console.print(
        f"[bold]usage since {data['since']}[/]: {t['tokens']:,} tokens (nominal {t['nominal_tokens']:,}, "
        f"saved {t['saved_tokens']:,}), {numbers.dollars(t['cost'])}, {t['requests']:,} requests"
        + (
            f" (+ {t['pre_answers']:,} L3 pre-answers, {t['pre_answer_tokens']:,} tokens)"
            if t.get("pre_answers")
            else ""
        )
    )
    tables = [
        (f"tokens by {data['by']}", data["breakdown"], ["key", "tokens", "nominal_tokens", "saved_tokens", "cost"]),
        (
            "service level: tokens per request",
            data["service"]["overall"],
            ["service", "decision_type", "requests", "p50", "p95", "p99", "cost"],
        ),
        (
            "top sessions (rolling 24 h)",
            data["session"]["top"],
            ["session_id", "user_id", "requests", "tokens", "cost"],
        ),
        (
            "business level",
            data["business"]["overall"],
            ["business_line", "business_event", "events", "tokens_per_event", "cost_per_event", "events_per_1k_tokens"],
        ),
        (
            "savings by mechanism",
            data["savings_by_mechanism"],
            ["stage", "section", "nominal_tokens", "tokens", "saved_tokens"],
        ),
        (
            "tokens by model: Jev's count and the server's (drift = server / Jev − 1; cost on the server's count); "
            "of the decide calls' prompts, the tokens Jev claimed the server's prefix cache would serve (its "
            "shared_context and state_cache savings) and those the server confirmed (cached_drift = confirmed / "
            "claimed − 1; either drift past ±5% is alerted)",
            [{"model": m, **r} for m, r in data["by_model"].items()],
            ["model", "calls", "tokens_jev", "tokens_server", "drift", "cached_claimed", "cached_confirmed"]
            + ["cached_drift", "cost"],
        ),
    ]
    from workers.analytics.report import AGREEMENT_COLUMNS, agreement_rows

    tables.append(
        (
            "tokens saved and the agreement each mechanism kept (shadow verdicts)",
            [{k: "-" if v is None else v for k, v in r.items()} for r in agreement_rows(data)],
            AGREEMENT_COLUMNS,
        )
    )
    for title, rows, columns in tables:
        table = Table(*columns, title=title)
        for r in rows:
            table.add_row(*(numbers.cell(c, r.get(c)) for c in columns))
        console.print(table)
    for row in data["savings_by_mechanism"]:
        if row.get("note"):
            console.print(f"[bold]{row['stage']};{row['section']}[/] spent more than its nominal share: {row['note']}")
    r = data["request"]
    console.print(
        f"request level: {r['requests']:,} requests, tokens/request p50 {r['tokens_per_request']['p50']} "
        f"p95 {r['tokens_per_request']['p95']} p99 {r['tokens_per_request']['p99']}; by stage "
        + ", ".join(f"{k} {v:,}" for k, v in r["tokens_by_stage"].items())
    )
    console.print("tiers: " + ", ".join(f"{k} {v:.1%}" for k, v in data["tier_shares"].items()))
    console.print("efficiency: " + ", ".join(f"{k} {v:.1%}" for k, v in data["efficiency"].items()))
    shown = {k: "–" if i["value"] is None else f"{i['value']:.2f}" for k, i in data["indices"].items()}
    console.print(
        "indices (seed 004): "
        + ", ".join(f"{k.upper()} {shown[k]} ({i['status']})" for k, i in data["indices"].items())
    )
    switches = data.get("switches")
    console.print(
        "kill switches: "
        + (
            "unknown (no broker answers at JEV_BROKER)"
            if switches is None
            else "all on"
            if all(switches.values())
            else "OFF: " + ", ".join(k for k, v in switches.items() if not v)
        )
    )
