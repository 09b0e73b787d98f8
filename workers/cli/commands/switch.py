"""`jev switch set NAME on|off` and `jev switch list`: runtime kill switches through the control topic."""

from __future__ import annotations

import asyncio

import orjson


def register(sub) -> None:
    p = sub.add_parser(
        "switch",
        help="turn a protection layer on or off at runtime, or list them",
        description="Switches travel on the control topic; every running stage and scoring "
        "worker applies them within about a second, without a restart.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("set", help="set one switch: jev switch set cache.l2 off")
    s.add_argument("switch")
    s.add_argument("state", choices=["on", "off"])
    s.set_defaults(func=run_set)
    t = actions.add_parser(
        "tune",
        help="set a mechanism's knob, e.g. to revert what the shadow guard tightened: "
        "jev switch tune cache.l2.min_similarity 0.8",
    )
    t.add_argument(
        "key",
        help="cache.l2.min_similarity (L2 similarity floor), score.cascade.widen (candidates "
        "added to every cascade beam) or distill.budget_scale (factor on every distill "
        "history budget)",
    )
    t.add_argument("value", type=float)
    t.set_defaults(func=run_tune)
    ls = actions.add_parser("list", help="every switch with its current state (read from the control topic)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_list)


def run_set(args, settings) -> int:
    from streams.core.switches import UnknownSwitch, switch_record
    from streams.runtime.control import publish

    try:
        record = switch_record(args.switch, args.state == "on")
    except UnknownSwitch as exc:
        print(f"jev switch: {exc}")
        return 2
    asyncio.run(publish(settings.bootstrap, [record]))
    print(f"{args.switch} {args.state}")
    return 0


def run_tune(args, settings) -> int:
    import time

    from schemas.records import Control
    from streams.core.switches import CASCADE_KEY, DISTILL_KEY, L2_KEY
    from streams.runtime.control import publish

    if args.key not in (L2_KEY, CASCADE_KEY, DISTILL_KEY):
        print(f"jev switch tune: unknown knob {args.key!r}; knobs are {L2_KEY}, {CASCADE_KEY}, {DISTILL_KEY}")
        return 2
    value = int(args.value) if args.key == CASCADE_KEY else args.value
    asyncio.run(publish(settings.bootstrap, [Control(kind="tune", key=args.key, value=value, ts=time.time())]))
    print(f"{args.key} {value}")
    return 0


def run_list(args, settings) -> int:
    from streams.core.switches import SWITCHES, Controls
    from streams.runtime.control import ControlReader

    controls = Controls()

    async def read_once():
        reader = ControlReader(settings.bootstrap, controls, poll_ms=500)
        task = asyncio.create_task(reader.run())
        await asyncio.sleep(1.5)
        reader.stopping.set()
        await task

    asyncio.run(read_once())
    if args.json:
        print(orjson.dumps(controls.switches).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("switch", "state", "what it protects")
    for switch, doc in SWITCHES.items():
        table.add_row(switch, "on" if controls.switches[switch] else "[red]off[/red]", doc)
    Console().print(table)
    return 0
