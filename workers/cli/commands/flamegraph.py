"""`jev flamegraph`: where the tokens went, as an interactive SVG flame graph."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser(
        "flamegraph",
        help="token flame graph (tenant;service;decision_type;stage;section) as SVG",
        description="Folds usage from ClickHouse into stacks and renders an SVG: hover a frame "
        "for its tokens, click to zoom.",
    )
    p.add_argument("--tenant", default="", help="only this tenant's rows")
    p.add_argument("--service", default="", help="only this service")
    p.add_argument("--since", default="24h", help="window: 90m, 24h, 7d or all (default 24h)")
    p.add_argument(
        "--weight",
        choices=["auto", "tokens", "cost", "nominal"],
        default="auto",
        help="frame width: actual tokens, cost, or nominal tokens; auto (default) = actual tokens, or "
        "nominal tokens where the window metered usage but spent none (the base install's lexical "
        "tiers spend no model tokens)",
    )
    p.add_argument("-o", "--output", default="flamegraph.svg", help="SVG file to write (default flamegraph.svg)")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from pathlib import Path

    from workers.analytics import flamegraph, owner

    scope = " ".join(f"{k}={v}" for k, v in (("tenant", args.tenant), ("service", args.service)) if v)
    weight, note = ("tokens" if args.weight == "auto" else args.weight), ""
    body = {"since": args.since, "tenant": args.tenant, "service": args.service, "weight": weight}
    try:
        stacks = owner.answer(settings, "flamegraph", body)[0]["stacks"]
        if not stacks and args.weight == "auto":
            nominal = owner.answer(settings, "flamegraph", {**body, "weight": "nominal"})[0]["stacks"]
            if nominal:
                stacks, weight = nominal, "nominal"
                note = (
                    "no model tokens were spent in the window (lexical tiers, rules and caches spend none): "
                    "frames show nominal tokens, what a naive system would have spent"
                )
    except (ValueError, RuntimeError) as e:
        print(f"jev flamegraph: {e}", file=sys.stderr)
        return 2
    title = f"Jev {weight} flame graph, last {args.since}" + (f" ({scope})" if scope else "")
    Path(args.output).write_text(flamegraph.render_svg(stacks, title, weight, note))
    print(
        f"wrote {args.output}: {len(stacks)} stacks, {sum(stacks.values()):,.6g} {weight}"
        + (f" ({note})" if note else ""),
        file=sys.stderr,
    )
    return 0
