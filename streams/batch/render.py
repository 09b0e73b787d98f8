"""Render batch members into prompt blocks, trim them to their quota, and build merged and individual prompts.

A member's quota covers its own block in the prompt plus its answer; the shared instructions are paid once
per call and reported apart. Over quota, trimming goes: the fields its kind drops first (config), then the
remaining non-essential fields, biggest first, then the tails of its longest lists, then a token cut.
"""

from __future__ import annotations

from typing import Any

from schemas.batch import BatchMember
from streams.batch.config import BatchTemplate
from streams.text import tokens

MIN_BLOCK_TOKENS = 24  # a block smaller than this cannot carry a member's essentials


class QuotaTooSmall(ValueError):
    pass


def one_line(text: Any) -> str:
    """`text` with every run of white space (line breaks included) made one space: a member's prose can then
    never open a line of its own, such as a `### ` block header or an `=== tag ===` answer head."""
    return " ".join(str(text).split())


def field_name(key: Any) -> str:
    """A key as a line may start with it: one line, without leading header or list marks."""
    return one_line(key).lstrip("#=-*> ") or "field"


def inline(value: Any, nested: bool = False) -> str:
    """One-line text of a value: dicts `k=v, k=v`, lists `a; b` (a list inside a list `a, b`)."""
    if isinstance(value, dict):
        return ", ".join(f"{one_line(k)}={inline(v, True)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return (", " if nested else "; ").join(inline(v, True) for v in value)
    return one_line(value)


def render_entry(key: str, value: Any, lines: list[str]) -> None:
    key = field_name(key)
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        lines.append(f"{key}:")
        lines.extend("- " + " | ".join(f"{k}: {inline(v)}" for k, v in item.items()) for item in value)
    elif isinstance(value, dict) and any(holds_objects(v) for v in value.values()):
        for k, v in value.items():
            render_entry(f"{key}.{k}", v, lines)
    else:
        lines.append(f"{key}: {inline(value)}")


def render_variables(variables: dict[str, Any]) -> str:
    """Compact text: `key: value` lines; lists of objects one `- k: v | k: v` line per item under a `key:`
    line; a dict holding objects one line per entry under its dotted path (`incidents.INC-7: sev=P1`)."""
    lines: list[str] = []
    for key, value in variables.items():
        render_entry(str(key), value, lines)
    return "\n".join(lines)


def block_text(member: BatchMember, variables: dict[str, Any], output_budget: int, tag: str = "m1") -> str:
    """A member's block, headed by its tag (`m<position>`), not its id: an id may hold spaces, brackets or
    `=` signs that would break the header or answer-head layout, and a short tag costs fewer tokens."""
    kind = one_line(member.kind).translate(str.maketrans("", "", "()"))
    header = f"### member {tag} (kind {kind}, answer within {output_budget} tokens)"
    return f"{header}\n{render_variables(variables)}\n"


def without(value: Any, key: str) -> tuple[Any, bool]:
    """`value` with every `key` removed at any depth, and whether anything was removed."""
    if isinstance(value, dict):
        removed = key in value
        out = {}
        for k, v in value.items():
            if k != key:
                out[k], sub = without(v, key)
                removed |= sub
        return out, removed
    if isinstance(value, list):
        pairs = [without(v, key) for v in value]
        return [v for v, _ in pairs], any(r for _, r in pairs)
    return value, False


def field_sizes(value: Any, model: str, sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Tokens held by each leaf key name (its value holds no objects), summed over every depth."""
    sizes = {} if sizes is None else sizes
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        if isinstance(k, str) and not holds_objects(v):
            sizes[k] = sizes.get(k, 0) + tokens.count(f"{k}: {inline(v)}", model)
        field_sizes(v, model, sizes)
    return sizes


def holds_objects(value: Any) -> bool:
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))


def min_answer_tokens(template: BatchTemplate, model: str) -> int:
    """The shortest answer that holds every section: one `<Section>: <word>` line each."""
    return tokens.count("\n".join(f"{name}: none" for name, _ in template.sections), model)


def output_budget(template: BatchTemplate, quota: int) -> int:
    return min(template.output_tokens, quota // 3)


def trim(
    member: BatchMember, template: BatchTemplate, drops: tuple[str, ...], model: str, tag: str = "m1"
) -> tuple[str, int, list[str]]:
    """(block, block tokens, what was trimmed) with block + output budget within the member's quota."""
    budget_out = output_budget(template, member.quota_tokens)
    if budget_out < (least := min_answer_tokens(template, model)):
        raise QuotaTooSmall(
            f"quota_tokens {member.quota_tokens} too small: its answer gets a third, {budget_out} "
            f"tokens, and one line per section of {template.id} needs at least {least}"
        )
    limit = member.quota_tokens - budget_out
    if limit < MIN_BLOCK_TOKENS:
        raise QuotaTooSmall(
            f"quota_tokens {member.quota_tokens} too small: the block needs at least "
            f"{MIN_BLOCK_TOKENS} tokens besides a {budget_out}-token answer"
        )
    variables, trimmed = dict(member.variables), []

    def current() -> tuple[str, int]:
        text = block_text(member, variables, budget_out, tag)
        return text, tokens.count(text, model)

    text, size = current()
    biggest_first = sorted(field_sizes(variables, model).items(), key=lambda kv: -kv[1])
    for key in (*drops, *(k for k, _ in biggest_first)):
        if size <= limit:
            break
        if key in template.essential or key in trimmed:
            continue
        variables, removed = without(variables, key)
        if removed:
            trimmed.append(key)
            text, size = current()
    while size > limit:
        lists = [k for k, v in variables.items() if isinstance(v, list) and len(v) > 1]
        if not lists:
            break
        longest = max(lists, key=lambda k: len(variables[k]))
        variables[longest] = variables[longest][:-1]
        trimmed.append(f"{longest}[-1]")
        text, size = current()
    if size > limit:
        text = tokens.truncate(text, limit - 1, model).rstrip() + "\n"
        size = tokens.count(text, model)
        trimmed.append("truncated")
    return text, size, trimmed


def shared_header(template: BatchTemplate, several: bool) -> str:
    """The instructions: a merged call asks for an `=== <member tag> ===` line before each answer, a call for
    one member does not (its answer needs no label, and so costs no more than the member's budget)."""
    lines = "\n".join(f"- {name}: {what}" for name, what in template.sections)
    layout = (
        'each member below, in the order given. Start each answer with a line "=== <member tag> ===", then'
        if several
        else "the member below:"
    )
    return (
        f"{template.instructions}\n\nWrite one answer for {layout} one line per section, "
        f'"<Section>: <text>", in this order:\n'
        f"Sections:\n{lines}\nKeep each answer within its token budget.\n\n"
    )


FOOTER = "### end\n"


def merged_prompt(template: BatchTemplate, blocks: list[str]) -> str:
    return shared_header(template, len(blocks) > 1) + "".join(blocks) + FOOTER


def individual_tokens(template: BatchTemplate, block: str, budget: int, model: str) -> int:
    """What this member alone costs: the instructions re-sent with its block, plus its output budget."""
    return tokens.count(merged_prompt(template, [block]), model) + budget


def answer_overhead(tag: str, model: str) -> int:
    """Tokens of the `=== tag ===` line that opens a member's answer in a merged output, with the line break
    that joins it to the answer before."""
    return tokens.count(f"\n=== {tag} ===\n", model)


def max_output(tags: list[str], budgets: list[int], model: str) -> int:
    """Max output tokens of a call: the members' budgets, plus their `=== tag ===` lines when several."""
    heads = sum(answer_overhead(t, model) for t in tags) if len(tags) > 1 else 0
    return sum(budgets) + heads
