"""Aggregator: group the members of one window by (job, template), plan the calls of each group, generate them.

Members that cannot take part (unknown template, quota too small for their essentials) come back as
explicit failures, never dropped.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from schemas.batch import BatchMember, BatchResult, MemberShare, MergedCall
from streams.batch import render
from streams.batch.config import BatchConfig, BatchTemplate
from streams.models.protocol import Generator
from streams.text import tokens


def group(members: list[BatchMember], max_members: int) -> list[list[BatchMember]]:
    """Members of the same job and template, in arrival order, in chunks of at most `max_members`."""
    groups: dict[tuple[str, str], list[BatchMember]] = defaultdict(list)
    for m in members:
        groups[(m.job, m.template)].append(m)
    return [g[i : i + max_members] for g in groups.values() for i in range(0, len(g), max_members)]


def failure(member: BatchMember, error: str, call_id: str = "") -> BatchResult:
    return BatchResult(
        job=member.job,
        member=member.member,
        kind=member.kind,
        template=member.template,
        status="failed",
        call_id=call_id,
        quota_tokens=member.quota_tokens,
        error=error,
    )


def call_id(members: list[BatchMember]) -> str:
    """Stable per member set, so a redelivered window gives the same id."""
    digest = hashlib.sha1("\n".join(f"{m.job}/{m.member}" for m in members).encode()).hexdigest()[:12]
    return f"{members[0].job}:{digest}"


class RetryRate:
    """The share of members of recent merged calls that needed a retry of their own, per template: what a merged
    call is expected to cost on top of its reservation (each retry costs the member's own call)."""

    def __init__(self, window: int = 64):
        self.window = window
        self.seen: dict[str, list[bool]] = defaultdict(list)

    def record(self, template: str, retried: list[bool]) -> None:
        self.seen[template] = (self.seen[template] + retried)[-self.window :]

    def rate(self, template: str) -> float:
        seen = self.seen.get(template)
        return sum(seen) / len(seen) if seen else 0.0


def plan(
    members: list[BatchMember], config: BatchConfig, model: str, retry_rate: float = 0.0
) -> tuple[list[MergedCall], list[BatchResult]]:
    """The calls for one group (same job and template), and the members that cannot join any.

    One merged call when it reserves fewer tokens (prompt plus max output), plus the retries that `retry_rate`
    (the share of members recent merged calls had to retry alone) makes likely, than the members' own calls
    together; else one call per member, each marked `sent: individual` with the figures."""
    failed: list = []
    shares: list[MemberShare] = []
    try:
        template = config.template(members[0].template)
    except KeyError as exc:
        return [], [failure(m, str(exc.args[0])) for m in members]
    for m in dict((m.member, m) for m in members).values():  # a member listed twice is planned once
        tag = f"m{len(shares) + 1}"
        try:
            block, size, trimmed = render.trim(m, template, config.drops(m.kind), model, tag)
        except render.QuotaTooSmall as exc:
            failed.append(failure(m, str(exc)))
            continue
        budget = render.output_budget(template, m.quota_tokens)
        shares.append(
            MemberShare(
                member=m,
                block=block,
                block_tokens=size,
                output_budget=budget,
                trimmed=trimmed,
                tag=tag,
                individual_tokens=render.individual_tokens(template, block, budget, model),
            )
        )
    if not shares:
        return [], failed
    merged = call(shares, template, model)
    alone = sum(s.individual_tokens for s in shares)
    retries = round(retry_rate * alone)
    if len(shares) > 1 and merged.prompt_tokens + merged.max_tokens + retries < alone:
        return [merged], failed
    expected = (
        f" and its likely retries {retries} ({retry_rate:.0%} of the members of recent merged calls needed one)"
        if retries
        else ""
    )
    why = (
        "the only member of its window"
        if len(shares) == 1
        else f"a merged call would reserve {merged.prompt_tokens + merged.max_tokens} tokens{expected}, "
        f"its {len(shares)} members alone {alone}"
    )
    return [call([s], template, model, sent="individual", note=f"sent individually: {why}") for s in shares], failed


def call(
    shares: list[MemberShare], template: BatchTemplate, model: str, sent: str = "merged", note: str = ""
) -> MergedCall:
    prompt = render.merged_prompt(template, [s.block for s in shares])
    max_tokens = render.max_output([s.tag for s in shares], [s.output_budget for s in shares], model)
    return MergedCall(
        call_id=call_id([s.member for s in shares]),
        job=shares[0].member.job,
        template=template.id,
        prompt=prompt,
        prompt_tokens=tokens.count(prompt, model),
        max_tokens=max_tokens,
        shares=shares,
        sent=sent,
        note=note,
    )


def generate(call: MergedCall, generator: Generator, model: str) -> MergedCall:
    """Run the merged call; a generator error is recorded on the call (the splitter retries each member)."""
    try:
        out = generator.generate(call.prompt, call.max_tokens)
    except Exception as exc:  # any backend failure: members are retried one by one, not lost
        call.error, call.generator = f"{type(exc).__name__}: {exc}", generator.name
        return call
    call.text, call.label, call.generator = out.text, out.label, generator.name
    call.output_tokens, call.latency_ms = tokens.count(out.text, model), out.latency_ms
    return call
