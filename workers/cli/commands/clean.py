"""`jev clean`: run the postprocess cleanup (the stage's own code) over one field of each JSONL line, and, on a
labelled file, measure it: the share of labelled filler openings and closings removed, and the texts that lost
anything else (content) or a number."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import orjson

from streams.output.clean import Cleaned, clean, dropped_content
from streams.output.patterns import resolve
from streams.text import language, tokens
from workers.harness.jsonl import get_path, iter_lines

KEY_CHARS = 24  # letters and digits either side of a removed filler that must meet in the cleaned text


EXAMPLE = """examples:
  jev clean answers.jsonl --field choices.0.turns.0.content --model gpt-4   # a table of what each text lost
  # measure cleanup on hand-labelled answers, one line each like
  #   {"answer": "好的！长城很长。希望对您有帮助！", "opening": "好的！", "closing": "希望对您有帮助！"}
  jev clean labelled.jsonl --field answer --opening-field opening --closing-field closing --json | tail -1
  # → {..., "numbers_lost": 0, "openings_removed": 1.0, "closings_removed": 1.0, "content_lost": 0}"""


def register(sub) -> None:
    p = sub.add_parser(
        "clean",
        help="strip preambles/closers/debug markers from generated text, "
        "truncate to a token limit, scan for sensitive words",
        description="Run the postprocess stage's cleanup over one field of each JSONL line. With labels, measure it: "
        "the share of labelled filler openings and closings removed whole, the texts that lost a number "
        "(numbers_lost) and those that lost more than their labelled filler (content_lost).",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.add_argument(
        "--opening-field",
        help="dotted path of each line's labelled filler opening (its exact text, empty for none); the summary "
        "then gives openings_removed, the share of them cleanup removed",
    )
    p.add_argument(
        "--closing-field",
        help="likewise for the filler closing; the summary then gives closings_removed, and with either label "
        "content_lost: texts that lost more than their labelled filler",
    )
    p.add_argument("--json", action="store_true", help="one JSON line per text, then a summary line")
    p.set_defaults(func=run)


def _string(value, path: str, number: int, field: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{path}:{number}: {field} holds {type(value).__name__}, not text; point it at a string")
    return value


def _rows(path: str, field: str, labels: dict[str, str]):
    """(text, {label name: labelled filler}) of each line; `labels` maps a label name to its dotted path."""
    for number, line in iter_lines(path):
        try:
            row = orjson.loads(line)
            text = _string(get_path(row, field), path, number, field)
            found = {name: _string(get_path(row, at) or "", path, number, at) for name, at in labels.items()}
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
        except KeyError as exc:
            raise ValueError(f"{path}:{number}: {exc.args[0]}") from None
        for name, filler in found.items():
            if filler and filler not in text:
                raise ValueError(f"{path}:{number}: the {name} label {filler!r} is not in the text; copy it exactly")
        yield text, found


def _alnum(text: str) -> str:
    """Letters and digits only, case folded: what a removal is judged on (spaces, punctuation, case aside)."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _contains_in_order(needle: str, hay: str) -> bool:
    it = iter(hay)
    return all(ch in it for ch in needle)


def judge(original: str, cleaned: str, opening: str = "", closing: str = "") -> dict:
    """Against hand labels: whether the labelled `opening` (the first occurrence in `original`) and `closing`
    (the last) were removed whole, and whether `cleaned` lost anything else. A filler counts as removed when the
    text either side of it now meets in `cleaned` (at its start for an opening, its end for a closing); content
    is lost when the letters and digits of `original` less its labelled fillers are not all in `cleaned`, in
    order."""
    spans = []
    if opening:
        at = original.find(opening)
        spans.append(("opening", at, at + len(opening)))
    if closing:
        at = original.rfind(closing)
        spans.append(("closing", at, at + len(closing)))
    spans.sort(key=lambda s: s[1])
    kept, pos = [], 0
    for _, start, end in spans:
        kept.append(original[pos:start])
        pos = max(pos, end)
    kept.append(original[pos:])
    got, out = _alnum(cleaned), {}
    for i, (name, _, _) in enumerate(spans):
        before, after = _alnum("".join(kept[: i + 1])), _alnum("".join(kept[i + 1 :]))
        key = before[-KEY_CHARS:] + after[:KEY_CHARS]
        out[name] = got.startswith(key) if not before else got.endswith(key) if not after else key in got
    out["content_lost"] = not _contains_in_order(_alnum("".join(kept)), got)
    return out


def labelled_summary(results: list[tuple[str, Cleaned]], labels: list[dict[str, str]]) -> dict:
    """openings/closings: how many texts carry the label; *_removed: the share of those removed whole;
    content_lost: texts that lost more than their labelled filler."""
    verdicts = [judge(t, c.text, **lab) for (t, c), lab in zip(results, labels)]
    out: dict = {}
    for name in ("opening", "closing"):
        judged = [v[name] for v in verdicts if name in v]
        if any(name in lab for lab in labels):
            out[f"{name}s"] = len(judged)
            out[f"{name}s_removed"] = round(sum(judged) / len(judged), 4) if judged else 0.0
    out["content_lost"] = sum(v["content_lost"] for v in verdicts)
    return out


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


def _line(c: Cleaned, verdict: dict | None) -> bytes:
    line = {
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "removed": c.removed,
        "flagged": c.flagged,
        "truncated": c.truncated,
        "text": c.text,
        "code_blocks": c.code_blocks,
    }
    if verdict is not None:  # per text: opening / closing removed (where labelled), content_lost
        line["labels"] = verdict
    return orjson.dumps(line)


def run(args, settings) -> int:
    from rich.console import Console
    from rich.progress import Progress

    model = args.model or settings.default_model
    results: list[tuple[str, Cleaned]] = []
    label_paths = {name: at for name, at in (("opening", args.opening_field), ("closing", args.closing_field)) if at}
    labels: list[dict[str, str]] = []
    try:
        tokens.configure(settings.tokenizers)
        tokens.encoding_name(model)
        patterns = resolve(args.patterns or settings.postprocess_patterns or None)
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("cleaning", total=None)
            for text, found in _rows(args.file, args.field, label_paths):
                cleaned = clean(text, model=model, max_tokens=args.max_tokens, config=patterns)
                results.append((text, cleaned))
                labels.append({name: filler for name, filler in found.items() if filler})
                if args.json:
                    verdict = judge(text, cleaned.text, **labels[-1]) if label_paths else None
                    sys.stdout.buffer.write(_line(cleaned, verdict) + b"\n")
                progress.advance(task)
    except BrokenPipeError:  # stdout closed early (`| head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, OSError) as exc:  # UnknownModel and bad patterns are ValueErrors
        print(f"jev clean: {exc}", file=sys.stderr)
        return 2
    totals = summary(results, patterns.version)
    if label_paths:
        totals.update(labelled_summary(results, labels))
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
        f"{totals['truncated']} truncated, {totals['numbers_lost']} lost a number · "
        f"patterns {totals['patterns_version']}"
    )
    if label_paths:
        shares = [
            f"{totals[f'{n}s_removed']:.1%} of {totals[f'{n}s']} filler {n}s removed"
            for n in ("opening", "closing")
            if f"{n}s" in totals
        ]
        Console().print(", ".join(shares) + f", {totals['content_lost']} texts lost content beyond their labels")
    return 0
