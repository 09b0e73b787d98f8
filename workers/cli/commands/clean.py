"""`jev clean`: run the postprocess cleanup (the stage's own code) over one field of each JSONL line."""

from __future__ import annotations

import os
import sys
from collections import Counter

import orjson

from streams.output.clean import Cleaned, clean, dropped_content
from streams.output.patterns import resolve
from streams.text import language, tokens
from workers.harness.jsonl import iter_field


def register(sub) -> None:
    p = sub.add_parser(
        "clean",
        help="strip preambles/closers/debug markers from generated text, "
        "truncate to a token limit, scan for sensitive words",
    )
    p.add_argument("file", help="JSONL file (or - for stdin)")
    p.add_argument(
        "--field",
        required=True,
        help="dotted path of the text in each line; numeric parts index lists, e.g. choices.0.turns.0.content",
    )
    p.add_argument("--model", help="model whose tokenizer counts and cuts (default: JEV_DEFAULT_MODEL)")
    p.add_argument("--max-tokens", type=int, help="cut each text to at most this many tokens")
    p.add_argument("--patterns", help="patterns YAML (default: JEV_POSTPROCESS_PATTERNS, else the bundled one)")
    p.add_argument("--json", action="store_true", help="one JSON line per text, then a summary line")
    p.set_defaults(func=run)


def _texts(path: str, field: str):
    for number, value in enumerate(iter_field(path, field), 1):
        if not isinstance(value, str):
            raise ValueError(
                f"{path}: text {number}: {field} holds {type(value).__name__}, not text; point --field at a string"
            )
        yield value


def summary(results: list[tuple[str, Cleaned]], version: str) -> dict:
    removed = Counter(kind for _, c in results for kind in c.removed)
    return {
        "texts": len(results),
        "tokens_before": sum(c.tokens_before for _, c in results),
        "tokens_after": sum(c.tokens_after for _, c in results),
        "tokens_removed": sum(c.tokens_removed for _, c in results),
        "changed_share": round(sum(c.text != t for t, c in results) / len(results), 4) if results else 0.0,
        "removed": dict(removed.most_common()),
        "flagged": sum(bool(c.flagged) for _, c in results),
        "truncated": sum(c.truncated for _, c in results),
        # cleanup must never take a number or a name out of an answer (a cut to --max-tokens may)
        "dropped_content": sum(bool(dropped_content(t, c.text)) for t, c in results if not c.truncated),
        # texts that lost a number written in any form (digits, number words, Chinese numerals)
        "numbers_lost": sum(
            bool(Counter(language.numbers(t)) - Counter(language.numbers(c.text)))
            for t, c in results
            if not c.truncated
        ),
        "patterns_version": version,
    }


def _line(c: Cleaned) -> bytes:
    return orjson.dumps(
        {
            "tokens_before": c.tokens_before,
            "tokens_after": c.tokens_after,
            "removed": c.removed,
            "flagged": c.flagged,
            "truncated": c.truncated,
            "text": c.text,
            "code_blocks": c.code_blocks,
        }
    )


def run(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    model = args.model or settings.default_model
    results: list[tuple[str, Cleaned]] = []
    try:
        tokens.configure(settings.tokenizers)
        tokens.encoding_name(model)
        patterns = resolve(args.patterns or settings.postprocess_patterns or None)
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("cleaning", total=None)
            for text in _texts(args.file, args.field):
                cleaned = clean(text, model=model, max_tokens=args.max_tokens, config=patterns)
                results.append((text, cleaned))
                if args.json:
                    sys.stdout.buffer.write(_line(cleaned) + b"\n")
                progress.advance(task)
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, OSError) as exc:  # UnknownModel and bad patterns are ValueErrors
        print(f"jev clean: {exc}", file=sys.stderr)
        return 2
    totals = summary(results, patterns.version)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(totals) + b"\n")
        return 0
    from rich.table import Table

    table = Table("#", "tokens before", "after", "removed", "flagged", title=f"{args.file} · {model}")
    for number, (_, c) in enumerate(results, 1):
        if c.removed or c.flagged or c.truncated:
            table.add_row(
                str(number),
                str(c.tokens_before),
                str(c.tokens_after),
                ", ".join(c.removed + (["truncated"] if c.truncated else [])),
                ", ".join(c.flagged),
            )
    Console().print(table)
    Console().print(
        f"{totals['texts']} texts, {totals['tokens_removed']} tokens removed "
        f"({totals['tokens_before']} → {totals['tokens_after']}), "
        f"{totals['changed_share']:.1%} changed, {totals['flagged']} flagged, "
        f"{totals['truncated']} truncated · patterns {totals['patterns_version']}"
    )
    return 0
