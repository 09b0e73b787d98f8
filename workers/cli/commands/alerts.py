"""`jev alerts`: evaluate the usage alerts now; print them, publish them, or POST them to a webhook."""

from __future__ import annotations

import asyncio
import sys

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "alerts",
        help="evaluate usage alerts (p95 drift, session tokens, budgets, spikes, ...)",
        description="Computes the alerts from the usage aggregates in ClickHouse. Exit code 1 when any alert fired.",
    )
    p.add_argument("--tenant", default="", help="only this tenant's rows")
    p.add_argument("--json", action="store_true", help="one JSON line per alert, then a summary line")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a threshold, e.g. --set session_tokens_24h=8000 --set fallback_rate=0.1",
    )
    p.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="DECISION_TYPE=TOKENS",
        help="daily token budget of a decision type (alert above budget_ratio of it)",
    )
    p.add_argument("--publish", action="store_true", help="send the alerts to the alerts topic")
    p.add_argument("--webhook", metavar="URL", help="POST the alerts as JSON to this URL")
    p.set_defaults(func=run)


def thresholds(sets: list[str], budgets: list[str], settings=None):
    from workers.analytics.alerts import Thresholds

    base, changes = Thresholds() if settings is None else Thresholds.from_settings(settings), {}
    for item in sets:
        name, _, value = item.partition("=")
        if name not in Thresholds.__dataclass_fields__ or name == "daily_budgets":
            raise ValueError(
                f"--set {item!r}: unknown threshold; known: "
                + ", ".join(f for f in Thresholds.__dataclass_fields__ if f != "daily_budgets")
            )
        changes[name] = type(getattr(base, name))(value)
    pairs = [b.partition("=") for b in budgets]
    return base.replace(**changes, daily_budgets={k: int(v) for k, _, v in pairs})


async def publish(settings, alerts) -> None:
    from aiokafka import AIOKafkaProducer

    from schemas.topics import name

    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap)
    await producer.start()
    try:
        for a in alerts:
            await producer.send(name("alerts"), a.dumps(), key=a.rule.encode())
        await producer.flush()
    finally:
        await producer.stop()


def run(args, settings) -> int:
    from schemas.records import Alert
    from workers.analytics import alerts as alerts_mod
    from workers.analytics import owner

    try:
        chosen = thresholds(args.set, args.budget, settings)
        body = {
            "set": {k: getattr(chosen, k) for k in chosen.__dataclass_fields__ if k != "daily_budgets"},
            "budgets": chosen.daily_budgets,
            "tenant": args.tenant,
        }
        found = [Alert(**a) for a in owner.answer(settings, "alerts", body)[0]["alerts"]]
        if args.publish and found:
            asyncio.run(publish(settings, found))
        if args.webhook and found:
            alerts_mod.post_webhook(args.webhook, found)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"jev alerts: {e}", file=sys.stderr)
        return 2
    if args.json:
        for a in found:
            print(orjson.dumps(a.asdict()).decode())
        print(orjson.dumps({"alerts": len(found), "rules": sorted({a.rule for a in found})}).decode())
    elif not found:
        print("no alerts")
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table("rule", "severity", "where", "what", "query", title="alerts")
        for a in found:
            table.add_row(a.rule, a.severity, a.scope, a.message, a.query)
        Console().print(table)
    return 1 if found else 0
