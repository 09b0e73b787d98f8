"""`jev tokens count`: exact token counts of text lines, or of one field of each JSONL line."""

from __future__ import annotations

import sys

import orjson

from streams.text import tokens
from workers.harness.jsonl import iter_field, iter_lines


def register(sub) -> None:
    p = sub.add_parser("tokens", help="count tokens exactly (tiktoken, or a local HF tokenizer)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser("count", help="tokens per line and in total; special-token strings count as text")
    c.add_argument("file", help="text file (one text per line), JSONL with --field, or - for stdin")
    c.add_argument("--model", help="model whose tokenizer to use (default: JEV_DEFAULT_MODEL)")
    c.add_argument("--field", help="dotted path of the text in each JSON line, e.g. choices.0.turns.0.content")
    c.add_argument("--json", action="store_true", help='print {"total": N, "lines": [...]}')
    c.set_defaults(func=run)


def texts(path: str, field: str | None):
    if field is None:
        return (line.decode("utf-8").rstrip("\r\n") for _, line in iter_lines(path))
    return (v if isinstance(v, str) else orjson.dumps(v).decode() for v in iter_field(path, field))


def count_lines(path: str, model: str, field: str | None = None) -> list[int]:
    return [tokens.count(text, model) for text in texts(path, field)]


def run(args, settings) -> int:
    model = args.model or settings.default_model
    try:
        tokens.configure(settings.tokenizers)
        tokens.encoding_name(model)
        counts = count_lines(args.file, model, args.field)
    except (ValueError, OSError) as exc:  # UnknownModel is a ValueError
        print(f"jev tokens count: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(orjson.dumps({"total": sum(counts), "lines": counts}).decode())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("line", "tokens", title=f"{args.file} · {model} ({tokens.encoding_name(model)})")
    for number, n in enumerate(counts, 1):
        table.add_row(str(number), str(n))
    table.add_row("total", str(sum(counts)), style="bold")
    Console().print(table)
    return 0
