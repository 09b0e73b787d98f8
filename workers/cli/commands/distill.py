"""`jev distill FILE.jsonl`: distill conversations with the distill stage's code and report the savings."""

from __future__ import annotations

import sys
import time

import orjson
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn

from streams.distill.conversations import read_jsonl
from streams.distill.core import LAYERS
from streams.distill.policy import load_policy
from streams.distill.report import Summary, distill_all, reduction


def register(sub) -> None:
    p = sub.add_parser("distill", help='distill conversations (JSONL of {"messages": [...]}) and report savings')
    p.add_argument("file", help='JSONL, one {"messages": [{"role", "content", "ts"?}]} per line ("-" = stdin)')
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="history token budget (default: the decision type's policy; 0 = no budget)",
    )
    p.add_argument("--decision-type", default="default", help="policy to apply (streams/distill/policies.yaml)")
    p.add_argument("--policies", default=None, help="YAML file of distill policies (default: JEV_DISTILL_POLICIES)")
    p.add_argument("--model", default="", help="tokenizer/model (default: JEV_DEFAULT_MODEL)")
    p.add_argument("--off", action="append", default=[], choices=LAYERS, help="switch a layer off (repeatable)")
    p.add_argument("--now", type=float, default=None, help="unix time ages are measured from (default: now)")
    p.add_argument("--json", action="store_true", help="one JSON line per conversation, then a summary line")
    p.set_defaults(func=run)


def run(args, settings) -> int:
    try:
        return _run(args, settings)
    except (ValueError, OSError) as exc:
        print(f"jev distill: {exc}", file=sys.stderr)
        return 2


def _run(args, settings) -> int:
    policy = load_policy(args.decision_type, settings.distill_policies if args.policies is None else args.policies)
    switches = {f"distill.{layer}": False for layer in args.off}
    path = "/dev/stdin" if args.file == "-" else args.file
    results = distill_all(
        read_jsonl(path),
        model=args.model or settings.default_model,
        budget=args.budget,
        policy=policy,
        switches=switches,
        now=time.time() if args.now is None else args.now,
    )
    summary = Summary()
    rows = []
    stderr = Console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("distilled {task.completed} conversations"),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    ) as progress:
        task = progress.add_task("distill", total=None)
        for number, (messages, result) in enumerate(results):
            summary.add(messages, result)
            progress.advance(task)
            if args.json:
                print(orjson.dumps({"conversation": number, **result.as_json()}).decode())
            else:
                rows.append((number, result))
    if args.json:
        print(orjson.dumps(summary.as_json()).decode())
        return 0
    _print_table(rows, summary)
    return 0


def _print_table(rows, summary: Summary) -> None:
    from rich.table import Table

    table = Table("#", "tokens before", "after", "reduction", "kept", "dropped (reason)")
    for number, result in rows:
        dropped = ", ".join(f"{i}:{reason}" for i, reason in result.dropped)
        table.add_row(
            str(number),
            str(result.tokens_before),
            str(result.tokens_after),
            f"{reduction(result):.0%}",
            str(len(result.kept)),
            dropped,
        )
    console = Console()
    console.print(table)
    total = summary.as_json()
    console.print(
        f"{total['conversations']} conversations · median reduction {total['median_reduction']:.0%} · "
        f"last user turn kept {total['last_user_kept']:.0%} · grew {total['grew']}"
    )
