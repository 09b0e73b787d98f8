"""distill(): shrink a conversation history under a token budget, layer by layer, with provenance.

Layers run in order dedup → domain → semantic → time; each can be switched off (switches
`distill.<layer>`) and reports the tokens it saved. The last user turn, every turn it refers to and
system turns are never dropped, and a history never grows: if the distilled lines would cost more
tokens than the original, the original is returned unchanged.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from streams.distill import dedup, domain, semantic, ttl
from streams.distill.constraints import constraint_turns
from streams.distill.policy import Policy
from streams.distill.tagger import references, tag_turn
from streams.text import tokens

LAYERS = ("dedup", "domain", "semantic", "time")
MEMO_CHARS = 4_096  # histories up to this long have their distillation remembered (MEMO_SIZE of them at most:
# their texts and results hold up to ~2 × 4,096 × 2,048 characters, 17–34 MB)
MEMO_SIZE = 2_048
_memo: OrderedDict[tuple, Distilled] = OrderedDict()


@dataclass(frozen=True)
class Distilled:
    kept: list[int]
    dropped: list[tuple[int, str]]
    lines: list[str]
    tokens_before: int
    tokens_after: int
    saved_by_layer: dict[str, int] = field(default_factory=dict)
    protected: list[int] = field(default_factory=list)

    def as_json(self) -> dict:
        return {
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "kept": self.kept,
            "dropped": [{"index": i, "reason": r} for i, r in self.dropped],
            "protected": self.protected,
            "saved_by_layer": self.saved_by_layer,
        }


def marker_id(index: int, ts: float | None) -> str:
    """S-YYYYMMDD-NNN from the turn's timestamp (UTC), S-NNN when it has none."""
    return f"S-{time.strftime('%Y%m%d', time.gmtime(ts))}-{index:03d}" if ts else f"S-{index:03d}"


def normalize(messages: list[dict]) -> list[dict]:
    """Messages with a role and text content (OpenAI text parts joined); unchanged when already so."""
    if all(isinstance(m.get("content"), str) and m.get("role") for m in messages):
        return messages
    return [
        {**m, "role": str(m.get("role") or "user"), "content": tokens.content_text(m.get("content") or "")}
        for m in messages
    ]


def last_user_index(messages: list[dict]) -> int:
    return next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), -1)


def protected_turns(messages: list[dict]) -> set[int]:
    """The last user turn, the turns it refers to, and system turns: never dropped."""
    last = last_user_index(messages)
    keep = {i for i, m in enumerate(messages) if m.get("role") == "system"}
    if last >= 0:
        keep |= {last} | references(messages, last)
    return keep


@functools.lru_cache(maxsize=8192)
def _marker_cost(marker: str, model: str) -> int:
    return tokens.count(marker, model)


@functools.lru_cache(maxsize=64)
def _space_before(role: str, model: str) -> int:
    """Tokens a space adds before `role: ` (the marker's separator merges into the role word).

    The tokenizers split `[S-…] role: text` into the marker's pieces and then the pieces of
    ` role: text`, so a marked line costs marker + line + this, without encoding the line again."""
    return tokens.count(f" {role}:", model) - tokens.count(f"{role}:", model)


def _line(role: str, content: str) -> str:
    return f"{role}: {content}"


def distill(
    messages: list[dict], *, model: str, budget: int | None, policy: Policy, switches: Mapping[str, bool], now: float
) -> Distilled:
    """Distill `messages` ([{role, content, ts?}]) for `model` under `budget` history tokens
    (None = the policy's budget; a budget <= 0 means none).

    Decision traffic distills the same history again and again (each decision of a session, every L1 hit, whose
    key is the distilled context): a history of up to MEMO_CHARS characters has its result remembered (the
    MEMO_SIZE latest), keyed by everything the result depends on. `now` enters only through the TTL weight of
    each exchange (a step of the policy's age bands), so the key holds those weights, not the clock. A remembered
    result is shared between callers: never modify one."""
    on = {layer: switches.get(f"distill.{layer}", True) for layer in LAYERS}
    messages = normalize(messages)
    roles = [m["role"] for m in messages]
    contents = [m["content"] for m in messages]
    stamps = [float(m["ts"]) if m.get("ts") is not None else None for m in messages]
    if sum(map(len, contents)) > MEMO_CHARS:
        return _distill(messages, roles, contents, stamps, model, budget, policy, on, now)
    weights = tuple(ttl.weight(unit, stamps, policy, now) for unit in semantic.exchanges(roles)) if on["time"] else ()
    key = (tuple(roles), tuple(contents), tuple(stamps), model, budget, policy, tuple(on.values()), weights)
    result = _memo.get(key)
    if result is None:
        result = _memo[key] = _distill(messages, roles, contents, stamps, model, budget, policy, on, now)
        if len(_memo) > MEMO_SIZE:
            _memo.popitem(last=False)
    else:
        _memo.move_to_end(key)
    return result


def _distill(
    messages: list[dict],
    roles: list[str],
    contents: list[str],
    stamps: list[float | None],
    model: str,
    budget: int | None,
    policy: Policy,
    on: dict[str, bool],
    now: float,
) -> Distilled:
    originals = [_line(r, c) for r, c in zip(roles, contents)]
    costs = [tokens.count(line, model) for line in originals]
    protected = protected_turns(messages)
    reasons: dict[int, str] = {}
    saved = {layer: 0 for layer in LAYERS}

    def drop(layer: str, found: Mapping[int, str]) -> None:
        for i, why in found.items():
            reasons[i] = f"{layer}:{why}"
            saved[layer] += costs[i]

    if on["dedup"]:
        drop(
            "dedup",
            {i: f"same as {marker_id(j, stamps[j])}" for i, j in dedup.duplicate_turns(contents, protected).items()},
        )
    if on["domain"]:
        candidates = [i for i in range(len(messages)) if i not in protected and i not in reasons]
        drop(
            "domain",
            domain.off_domain(contents, candidates, policy.exclude_terms, policy.domain_terms, policy.exclude_top_k),
        )
    units = semantic.exchanges(roles)
    tags = [tag_turn(r, c) for r, c in zip(roles, contents)] if on["semantic"] else ["other"] * len(roles)
    if on["semantic"] and policy.tagger == "minilm":
        from streams.distill.minilm_tagger import tagger

        model_tagger = tagger()
        tags = model_tagger.retag(roles, contents, tags) if model_tagger else tags
    unit_tags = [semantic.exchange_tag(u, roles, tags) for u in units]
    folded: dict[int, str] = {}
    if on["semantic"]:
        stated = protected | constraint_turns(messages)  # a constraint no later turn restates is never folded
        folded = semantic.fold(
            units, unit_tags, tags, stated, set(reasons), policy.keep_resolved, policy.keep_informational
        )
        drop("semantic", folded)
    heads = {unit[0] for unit in units}
    placeholders = _placeholders(len(messages), folded, reasons, stamps, heads)
    placeholder_costs = {i: tokens.count(text, model) for i, text in placeholders.items()}
    placeholder_tokens = sum(placeholder_costs.values())
    saved["semantic"] -= placeholder_tokens
    if on["time"]:
        limit = policy.budget if budget is None else budget
        limit = limit if limit and limit > 0 else None
        reserved = placeholder_tokens + sum(costs[i] + ttl.MARKER_TOKENS for i in protected)
        drop("time", ttl.select(units, unit_tags, costs, stamps, protected, set(reasons), limit, reserved, policy, now))
    kept = [i for i in range(len(messages)) if i not in reasons]
    turns = _Turns(roles, contents, stamps, costs, model)
    return _render(turns, kept, reasons, placeholders, placeholder_costs, protected, saved, on["dedup"])


def _placeholders(
    n: int, folded: Mapping[int, str], reasons: Mapping[int, str], stamps: list[float | None], heads: set[int]
) -> dict[int, str]:
    """{index of the first folded turn of a run: placeholder line}; a kept turn ends a run, turns
    dropped by other layers do not."""
    out: dict[int, str] = {}
    run: list[tuple[int, str]] = []
    for i in range(n + 1):
        if i < n and i in folded:
            run.append((i, folded[i]))
        elif i == n or i not in reasons:
            if run:
                out[run[0][0]] = semantic.placeholder([(marker_id(j, stamps[j]), tag, j in heads) for j, tag in run])
            run = []
    return out


@dataclass(frozen=True)
class _Turns:
    """A history's turns as _distill read them: roles, contents, timestamps and token costs for `model`."""

    roles: list[str]
    contents: list[str]
    stamps: list[float | None]
    costs: list[int]
    model: str


def _render(
    turns: _Turns,
    kept: list[int],
    reasons: Mapping[int, str],
    placeholders: Mapping[int, str],
    placeholder_costs: Mapping[int, int],
    protected: set[int],
    saved: dict[str, int],
    dedup_on: bool,
) -> Distilled:
    """The kept turns with provenance markers and the placeholders, in history order; the original
    history when that would not be shorter."""
    roles, contents, stamps, costs, model = turns.roles, turns.contents, turns.stamps, turns.costs, turns.model
    before = sum(costs)
    texts = {i: contents[i] for i in kept}
    if dedup_on:
        stripped = dedup.strip_repeated_paragraphs(kept, texts, protected, lambda j: marker_id(j, stamps[j]))
        texts.update(stripped)
    lines: list[str] = []
    after = 0
    for i in range(len(roles)):
        if i in placeholders:
            lines.append(placeholders[i])
            after += placeholder_costs[i]
        if i in texts:
            plain = _line(roles[i], texts[i])
            plain_cost = costs[i] if texts[i] is contents[i] else tokens.count(plain, model)
            saved["dedup"] += costs[i] - plain_cost
            marker = f"[{marker_id(i, stamps[i])}]"
            lines.append(f"{marker} {plain}")
            overhead = _marker_cost(marker, model) + _space_before(roles[i], model)
            saved["provenance"] = saved.get("provenance", 0) - overhead
            after += plain_cost + overhead
    if after > before:
        return Distilled(
            list(range(len(roles))),
            [],
            [_line(r, c) for r, c in zip(roles, contents)],
            before,
            before,
            {},
            sorted(protected),
        )
    return Distilled(
        kept, sorted(reasons.items()), lines, before, after, {k: v for k, v in saved.items() if v}, sorted(protected)
    )
