"""`jev templates lint|render`: check prompt templates' contracts, or render one within its budget."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from streams.ingest import templates as tpl
from streams.ingest.contracts import ContractError
from streams.text import tokens

MAX_INSTRUCTION_TOKENS = 300


def register(sub) -> None:
    p = sub.add_parser("templates", help="lint or render prompt templates (token budgets and contracts)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    lint_p = actions.add_parser(
        "lint", help=f"flag instructions over {MAX_INSTRUCTION_TOKENS} tokens and variables without a contract"
    )
    lint_p.add_argument("paths", nargs="*", help="template files or directories (default: the bundled templates)")
    lint_p.add_argument("--model", help="tokenizer to count with (default: JEV_DEFAULT_MODEL)")
    lint_p.add_argument("--json", action="store_true", help="one JSON line per template, then a summary")
    lint_p.set_defaults(func=run_lint)
    render_p = actions.add_parser("render", help="render a template with variables from a JSON file")
    render_p.add_argument("template", help="template id (bundled) or a template file")
    render_p.add_argument("--vars", required=True, help="JSON file of the template's variables ('-' = stdin)")
    render_p.add_argument("--model", help="tokenizer to count with (default: JEV_DEFAULT_MODEL)")
    render_p.add_argument("--json", action="store_true", help="print the rendering as JSON")
    render_p.set_defaults(func=run_render)


def template_files(paths: list[str]) -> list[Path]:
    found = []
    for p in map(Path, paths or [str(tpl.BUNDLED)]):
        found += sorted(p.glob("*.yaml")) if p.is_dir() else [p]
    return found


def lint(template: tpl.Template, model: str) -> dict:
    """The instruction part's tokens and the problems found in one template."""
    instruction = sum(tokens.count(s.source, model) for s in template.sections if s.instruction)
    problems = []
    if instruction > MAX_INSTRUCTION_TOKENS:
        problems.append(
            f"instruction is {instruction} tokens, over {MAX_INSTRUCTION_TOKENS}: move detail into "
            f"variables or split the decision"
        )
    if not any(s.instruction for s in template.sections):
        problems.append("no section is marked instruction: true")
    used = tpl.referenced_variables(template)
    for name in sorted(used - set(template.variables)):
        problems.append(f"variable {name!r} has no contract: declare it under variables with max_tokens")
    for name, contract in sorted(template.variables.items()):
        if contract.max_tokens is None:
            problems.append(f"variable {name!r} has no max_tokens in its contract")
    return {
        "template": template.id,
        "version": template.version,
        "path": template.path,
        "instruction_tokens": instruction,
        "budget": template.budget,
        "problems": problems,
    }


def run_lint(args, settings) -> int:
    model = args.model or settings.default_model
    tokens.configure(settings.tokenizers)
    rows = []
    for path in template_files(args.paths):
        try:
            rows.append(lint(tpl.load(path), model))
        except ContractError as exc:
            rows.append(
                {
                    "template": path.stem,
                    "version": "",
                    "path": str(path),
                    "instruction_tokens": 0,
                    "budget": 0,
                    "problems": [str(exc)],
                }
            )
    flagged = sum(1 for r in rows if r["problems"])
    if args.json:
        for row in rows:
            print(orjson.dumps(row).decode())
        print(orjson.dumps({"templates": len(rows), "flagged": flagged}).decode())
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table("template", "instruction tokens", "budget", "problems", title=f"template lint ({model})")
        for r in rows:
            table.add_row(
                f"{r['template']} v{r['version']}",
                str(r["instruction_tokens"]),
                str(r["budget"]),
                "\n".join(r["problems"]) or "[green]ok[/green]",
            )
        Console().print(table)
    return 1 if flagged else 0


def run_render(args, settings) -> int:
    model = args.model or settings.default_model
    tokens.configure(settings.tokenizers)
    try:
        template = (
            tpl.load(args.template) if Path(args.template).is_file() else tpl.Templates.from_dir().get(args.template)
        )
        raw = sys.stdin.buffer.read() if args.vars == "-" else Path(args.vars).read_bytes()
        rendered = tpl.render(template, orjson.loads(raw), model)
    except (ContractError, OSError, orjson.JSONDecodeError) as exc:
        print(f"jev templates render: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(orjson.dumps(rendered.__dict__).decode())
    else:
        print(rendered.text)
        print(
            f"\n[{rendered.tokens} tokens of {template.budget}; level {rendered.level}"
            f"{'; ' + '; '.join(rendered.cut) if rendered.cut else ''}]",
            file=sys.stderr,
        )
    return 0
