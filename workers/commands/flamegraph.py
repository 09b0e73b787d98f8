"""`jev flamegraph`: where the tokens went, as an interactive SVG flame graph."""
from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("flamegraph", help="token flame graph (tenant;service;decision_type;stage;section) as SVG",
                       description="Folds usage from ClickHouse into stacks and renders an SVG: hover a frame "
                                   "for its tokens, click to zoom.")
    p.add_argument("--tenant", default="", help="only this tenant's rows")
    p.add_argument("--service", default="", help="only this service")
    p.add_argument("--since", default="24h", help="window: 90m, 24h, 7d or all (default 24h)")
    p.add_argument("--weight", choices=["tokens", "cost", "nominal"], default="tokens",
                   help="frame width: actual tokens (default), cost, or nominal tokens")
    p.add_argument("-o", "--output", default="flamegraph.svg", help="SVG file to write (default flamegraph.svg)")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    from pathlib import Path

    from workers.analytics import flamegraph, owner

    scope = " ".join(f"{k}={v}" for k, v in (("tenant", args.tenant), ("service", args.service)) if v)
    title = f"Jev {args.weight} flame graph, last {args.since}" + (f" ({scope})" if scope else "")
    body = {"since": args.since, "tenant": args.tenant, "service": args.service, "weight": args.weight}
    try:
        stacks = owner.answer(settings, "flamegraph", body)[0]["stacks"]
    except (ValueError, RuntimeError) as e:
        print(f"jev flamegraph: {e}", file=sys.stderr)
        return 2
    Path(args.output).write_text(flamegraph.render_svg(stacks, title, args.weight))
    print(f"wrote {args.output}: {len(stacks)} stacks, {sum(stacks.values()):,.6g} {args.weight}", file=sys.stderr)
    return 0
