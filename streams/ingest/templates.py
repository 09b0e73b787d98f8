"""Prompt templates (Jinja2) with a token budget, variable and output contracts, and prioritised sections.

A template is a YAML file (id, version, budget, policy reject | degrade, output and variable contracts, sections
with priorities). Rendering counts tokens exactly; over budget, `reject` raises and `degrade` drops the
lowest-priority optional sections, then keeps only the key fields of structured variables, recording each cut.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import orjson
import yaml
from jinja2 import meta
from jinja2.sandbox import SandboxedEnvironment

from schemas.records import Request
from streams.ingest.contracts import (
    ContractError,
    OutputContract,
    VariableContract,
    check_variables,
    parse_output,
    parse_variable,
    token_limit,
)
from streams.text import tokens
from streams.text.prompt import history_lines

BUNDLED = Path(__file__).with_name("templates")
POLICIES = ("reject", "degrade")
ENV = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False, trim_blocks=True, lstrip_blocks=True)
ENV.filters["json"] = lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS, default=str).decode()


@functools.lru_cache(maxsize=1024)
def compiled(source: str) -> jinja2.Template:
    return ENV.from_string(source)


@dataclass(frozen=True)
class Section:
    name: str
    source: str
    priority: int = 50
    required: bool = False
    instruction: bool = False


@dataclass(frozen=True)
class Template:
    id: str
    version: str
    budget: int
    policy: str
    output: OutputContract
    variables: dict[str, VariableContract]
    sections: tuple[Section, ...]
    path: str = ""


@dataclass
class Rendered:
    template_id: str
    version: str
    text: str
    tokens: int
    sections: dict[str, int]  # tokens per kept section
    level: str  # full | dropped | key_fields
    cut: list[str] = field(default_factory=list)
    instruction: str = ""  # the instruction sections' text: the "template" part of count_sections
    max_output_tokens: int = 0
    min_output_tokens: int = 0


class OverBudget(ContractError):
    def __init__(self, message: str):
        super().__init__("over_budget", message)


def load(path: str | Path) -> Template:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ContractError("bad_template", f"{path}: cannot read template ({exc})") from None
    try:
        return parse(doc, str(path))
    except (KeyError, TypeError, jinja2.TemplateSyntaxError) as exc:
        raise ContractError("bad_template", f"{path}: {type(exc).__name__}: {exc}") from None
    except ContractError as exc:
        raise ContractError(exc.reason, f"{path}: {exc}") from None


def parse(doc: dict, path: str = "") -> Template:
    if not isinstance(doc, dict) or not doc.get("id") or not doc.get("sections"):
        raise ContractError("bad_template", "a template needs id, budget, policy, output, variables and sections")
    if doc.get("policy", "reject") not in POLICIES:
        raise ContractError("bad_template", f"policy {doc['policy']!r}: expected one of {', '.join(POLICIES)}")
    sections = tuple(
        Section(
            s["name"],
            s["text"],
            int(s.get("priority", 50)),
            bool(s.get("required", False)),
            bool(s.get("instruction", False)),
        )
        for s in doc["sections"]
    )
    if len({s.name for s in sections}) != len(sections):
        raise ContractError("bad_template", "section names must be unique")
    for s in sections:
        ENV.parse(s.source)  # syntax errors surface at load, not at the first request
    return Template(
        id=str(doc["id"]),
        version=str(doc.get("version", "1")),
        budget=token_limit(doc.get("budget"), "budget"),
        policy=doc.get("policy", "reject"),
        output=parse_output(doc.get("output")),
        variables={n: parse_variable(n, v) for n, v in (doc.get("variables") or {}).items()},
        sections=sections,
        path=path,
    )


def referenced_variables(template: Template) -> set[str]:
    return set().union(*(meta.find_undeclared_variables(ENV.parse(s.source)) for s in template.sections))


def render(template: Template, variables: dict[str, Any], model: str) -> Rendered:
    """Render within the template's budget, per its policy; raises ContractError/OverBudget with the fix."""
    values = {name: variables.get(name) for name in template.variables} | variables
    check_variables(template.variables, values, model)
    kept = list(template.sections)
    result = attempt(template, kept, values, model, "full", [])
    if result.tokens <= template.budget:
        return result
    if template.policy == "reject":
        raise OverBudget(
            f"template {template.id} v{template.version} renders to {result.tokens} tokens, over its "
            f"budget of {template.budget} (sections: {result.sections}); shorten the inputs or use "
            f"policy: degrade"
        )
    cut = []
    for section in sorted((s for s in kept if not s.required), key=lambda s: s.priority):
        kept.remove(section)
        if section.name not in result.sections:  # it rendered empty: nothing to cut
            continue
        cut.append(f"dropped section {section.name} ({result.sections.get(section.name, 0)} tokens)")
        result = attempt(template, kept, values, model, "dropped", cut)
        if result.tokens <= template.budget:
            return result
    for name, contract in template.variables.items():
        if not contract.key_fields:
            continue
        reduced = key_fields(values.get(name), contract.key_fields)
        if reduced != values.get(name):
            values[name] = reduced
            cut.append(f"kept key fields of {name}: {', '.join(contract.key_fields)}")
    result = attempt(template, kept, values, model, "key_fields", cut)
    if result.tokens > template.budget:
        raise OverBudget(
            f"template {template.id} v{template.version} is {result.tokens} tokens after degrading "
            f"({'; '.join(cut)}), still over its budget of {template.budget}: raise the budget or "
            f"lower the variables' contracts"
        )
    return result


def attempt(
    template: Template, sections: list[Section], values: dict, model: str, level: str, cut: list[str]
) -> Rendered:
    enc = tokens.for_model(model)
    parts, counts, instruction = [], {}, []
    for section in sections:
        try:
            text = compiled(section.source).render(values).strip()
        except jinja2.UndefinedError as exc:
            raise ContractError(
                "missing_variable",
                f"template {template.id} section {section.name}: {exc.message}; "
                f"declare the variable with a contract and pass it",
            ) from None
        if text:
            parts.append(text)
            counts[section.name] = len(enc.encode_ordinary(text))
            if section.instruction:
                instruction.append(text)
    text = "\n\n".join(parts)
    return Rendered(
        template.id,
        template.version,
        text,
        len(enc.encode_ordinary(text)),
        counts,
        level,
        list(cut),
        "\n\n".join(instruction),
        template.output.max_tokens,
        template.output.min_tokens,
    )


def key_fields(value: Any, fields: tuple[str, ...]) -> Any:
    """A mapping (or each mapping of a list) reduced to `fields`; anything else unchanged."""
    if isinstance(value, dict):
        return {k: value[k] for k in fields if k in value}
    if isinstance(value, list):
        return [key_fields(v, fields) for v in value]
    return value


def request_variables(request: Request) -> dict[str, Any]:
    """What a template sees: the request's state, history lines and candidates, then template.variables."""
    base = {
        "state": request.state,
        "history": history_lines(request),
        "candidates": [{"id": c.id, "text": c.text} for c in request.candidates],
    }
    return base | (dict(request.template.variables) if request.template else {})


class Templates:
    """Templates by (id, version), loaded once from a directory of YAML files."""

    def __init__(self, templates: list[Template]):
        self.by_key = {(t.id, t.version): t for t in templates}

    @classmethod
    def from_dir(cls, directory: str | Path | None = None) -> Templates:
        return cls([load(p) for p in sorted(Path(directory or BUNDLED).glob("*.yaml"))])

    def get(self, template_id: str, version: str | None = None) -> Template:
        if version is None:
            versions = [t for (i, _), t in self.by_key.items() if i == template_id]
            found = max(versions, key=lambda t: t.version) if versions else None
        else:
            found = self.by_key.get((template_id, version))
        if found is None:
            known = ", ".join(f"{i} v{v}" for i, v in sorted(self.by_key))
            raise ContractError(
                "unknown_template", f"template {template_id!r} v{version} is not loaded; known: {known}"
            )
        return found

    def render_request(self, request: Request, model: str) -> Rendered:
        ref = request.template
        if ref is None:
            raise ContractError("missing_field", "request has no template")
        return render(self.get(ref.id, ref.version), request_variables(request), model)
