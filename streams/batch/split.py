"""Splitter: merged output → one result per member, each checked against its contract.

Contract: every template section present and non-empty, answer within the member's output budget (so block
plus answer stay within its quota). A member that fails (missing from the output, malformed, over budget,
or the merged call itself failed) is retried on its own once; if that fails too it gets an explicit
`failed` result naming why. Every member of the call gets exactly one result.
"""

from __future__ import annotations

import re

from schemas.batch import BatchResult, MemberShare, MergedCall
from streams.batch import render
from streams.batch.config import BatchTemplate
from streams.models import pricing
from streams.models.protocol import Generator
from streams.text import tokens

ANSWER_HEAD = re.compile(r"^\s*=+\s*(.+?)\s*=+\s*$", re.MULTILINE)


def parse_answers(text: str) -> dict[str, str]:
    """member tag → its answer text (without the `=== tag ===` line); the first answer of a repeated tag wins."""
    heads = list(ANSWER_HEAD.finditer(text))
    answers: dict[str, str] = {}
    for head, nxt in zip(heads, heads[1:] + [None]):
        answers.setdefault(head.group(1), text[head.end() : nxt.start() if nxt else len(text)].strip())
    return answers


def parse_sections(answer: str, names: list[str]) -> dict[str, str]:
    """Section name → text. A line starting `<Section>:` (any case, optional markdown marks) opens a section;
    other lines continue the open one."""
    pattern = re.compile(r"^[#*\s]*(" + "|".join(re.escape(n) for n in names) + r")[*\s]*:\s*(.*)$", re.IGNORECASE)
    canonical = {n.lower(): n for n in names}
    sections: dict[str, str] = {}
    current = None
    for line in answer.splitlines():
        found = pattern.match(line)
        if found:
            current = canonical[found.group(1).lower()]
            sections.setdefault(current, "")
            sections[current] = (sections[current] + " " + found.group(2)).strip()
        elif current and line.strip():
            sections[current] = (sections[current] + " " + line.strip()).strip()
    return sections


def problems(answer: str | None, template: BatchTemplate, budget: int, model: str) -> list[str]:
    """Why `answer` breaks the member's contract (empty list: it complies)."""
    if answer is None:
        return ["missing from the merged output"]
    names = [name for name, _ in template.sections]
    found = parse_sections(answer, names)
    out = [f"missing section {n}" for n in names if not found.get(n)]
    used = tokens.count(answer, model)
    if used > budget:
        out.append(f"answer {used} tokens over its budget {budget}")
    return out


def apportion(total: int, weights: list[int]) -> list[int]:
    """Split `total` in proportion to `weights` (evenly when all are 0); the parts sum to `total` exactly."""
    if not weights:
        return []
    base = sum(weights)
    raw = [total * w / base for w in weights] if base else [total / len(weights)] * len(weights)
    parts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: parts[i] - raw[i])[: total - sum(parts)]:
        parts[i] += 1
    return parts


def result(
    share: MemberShare,
    call: MergedCall,
    template: BatchTemplate,
    answer: str,
    input_tokens: int,
    output_tokens: int,
    reserved: int,
    model: str,
    retried: bool,
    label: str,
    generator: str,
    errors: list[str],
) -> BatchResult:
    m = share.member
    names = [name for name, _ in template.sections]
    return BatchResult(
        job=m.job,
        member=m.member,
        kind=m.kind,
        template=m.template,
        status="failed" if errors else "ok",
        call_id=call.call_id,
        text=answer,
        sections=parse_sections(answer, names),
        label=label,
        generator=generator,
        retried=retried,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        reserved_tokens=reserved,
        quota_tokens=m.quota_tokens,
        output_budget=share.output_budget,
        quota_used=share.block_tokens + tokens.count(answer, model),
        individual_tokens=share.individual_tokens,
        trimmed=list(share.trimmed),
        cost=pricing.cost(model, input_tokens, 0, output_tokens),
        error="; ".join(errors),
        sent=call.sent,
        note=call.note,
    )


def own_answer(text: str, tag: str, alone: bool) -> str | None:
    """The member's answer in a call's output, under its `=== tag ===` line; the answer of a call for one member
    may come without that line, or under another one."""
    answers = parse_answers(text)
    if alone and tag not in answers:
        return text.strip() if not answers else next(iter(answers.values())) if len(answers) == 1 else None
    return answers.get(tag)


def retry(
    share: MemberShare, template: BatchTemplate, generator: Generator, model: str
) -> tuple[str, int, int, list[str], str]:
    """One call for this member alone, with at most its output budget: (answer, prompt tokens, output tokens,
    problems, label)."""
    prompt = render.merged_prompt(template, [share.block])
    prompt_tokens = tokens.count(prompt, model)
    try:
        out = generator.generate(prompt, share.output_budget)
    except Exception as exc:  # the backend failed for this member too: an explicit failure, not a drop
        return "", prompt_tokens, 0, [f"retry failed: {type(exc).__name__}: {exc}"], generator.label
    output_tokens = tokens.count(out.text, model)
    answer = own_answer(out.text, share.tag, True)
    if answer is not None and tokens.count(answer, model) > share.output_budget:
        answer = tokens.truncate(answer, share.output_budget, model).strip()  # token-exact cut, then re-checked
    return answer or "", prompt_tokens, output_tokens, problems(answer, template, share.output_budget, model), out.label


def split(call: MergedCall, template: BatchTemplate, generator: Generator, model: str) -> list[BatchResult]:
    """One result per member of `call`, retrying the members whose part of the output fails. A member's
    tokens cover every call it took: its share of this one plus, when retried, its own call (prompt and
    output budget), so a retry is never free."""
    shares = call.shares
    alone = len(shares) == 1
    found = [None if call.error else own_answer(call.text, s.tag, alone) for s in shares]
    inputs = [
        s.block_tokens + extra
        for s, extra in zip(
            shares, apportion(call.prompt_tokens - sum(s.block_tokens for s in shares), [1] * len(shares))
        )
    ]
    outputs = apportion(call.output_tokens, [tokens.count(a or "", model) for a in found])
    limits = apportion(
        call.max_tokens, [s.output_budget + (0 if alone else render.answer_overhead(s.tag, model)) for s in shares]
    )
    results = []
    for share, answer, input_tokens, output_tokens, limit in zip(shares, found, inputs, outputs, limits):
        errors = [call.error] if call.error else problems(answer, template, share.output_budget, model)
        if not errors:
            results.append(
                result(
                    share,
                    call,
                    template,
                    answer or "",
                    input_tokens,
                    output_tokens,
                    input_tokens + limit,
                    model,
                    False,
                    call.label,
                    call.generator,
                    [],
                )
            )
            continue
        again, prompt_tokens, out_tokens, retry_errors, label = retry(share, template, generator, model)
        errors = [f"merged: {'; '.join(errors)}", f"retry: {'; '.join(retry_errors)}"] if retry_errors else []
        results.append(
            result(
                share,
                call,
                template,
                again,
                input_tokens + prompt_tokens,
                output_tokens + out_tokens,
                input_tokens + limit + prompt_tokens + share.output_budget,
                model,
                True,
                label,
                generator.name,
                errors,
            )
        )
    spent, apart = sum(r.reserved_tokens for r in results), sum(s.individual_tokens for s in shares)
    if len(shares) > 1 and spent > apart:  # said on every result; the planner's retry rate sends the next ones alone
        note = (
            f"merged call and its {sum(r.retried for r in results)} retries reserved {spent} tokens, "
            f"its members alone {apart}"
        )
        for r in results:
            r.note = note
    return results
