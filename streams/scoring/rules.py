"""The rules tier: YAML conditions on state fields → action, zero tokens.

A rule file is a list of {name, decision_type ("*" for any), when: ["field op value", …], action}.
Every condition of a rule must hold; the first matching rule wins.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from schemas.records import Decision, Ranked, UsageEvent, Work
from streams.scoring.ledger import Ledger, candidate_lengths, nominal_tokens

OPS = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
    "in": lambda a, b: a in b,
}


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: Any

    @classmethod
    def parse(cls, text: str, rule: str) -> Condition:
        for op in sorted(OPS, key=len, reverse=True):
            left, sep, right = text.partition(f" {op} ")
            if sep:
                return cls(left.strip(), op, yaml.safe_load(right))
        raise ValueError(
            f"rule {rule!r}: cannot parse condition {text!r}; write 'field OP value' with OP one of {', '.join(OPS)}"
        )

    def holds(self, state: dict) -> bool:
        value = state
        for part in self.field.split("."):
            if not isinstance(value, dict) or part not in value:
                return False
            value = value[part]
        try:
            return bool(OPS[self.op](value, self.value))
        except TypeError:
            return False


@dataclass(frozen=True)
class Rule:
    name: str
    decision_type: str
    conditions: tuple[Condition, ...]
    action: str


def load(path: str = "") -> list[Rule]:
    text = Path(path).read_text() if path else resources.files("streams.scoring").joinpath("rules.yaml").read_text()
    rules = []
    for i, raw in enumerate(yaml.safe_load(text) or []):
        name = raw.get("name", f"rule-{i}")
        if "action" not in raw or "when" not in raw:
            raise ValueError(f"rule {name!r} needs `when` (list of conditions) and `action` (candidate id)")
        rules.append(
            Rule(
                name,
                raw.get("decision_type", "*"),
                tuple(Condition.parse(c, name) for c in raw["when"]),
                str(raw["action"]),
            )
        )
    return rules


def match(rules: list[Rule], decision_type: str, state: Any, candidate_ids: list[str]) -> Rule | None:
    """The first rule for this decision type whose conditions all hold and whose action is offered."""
    if not isinstance(state, dict):
        return None
    for rule in rules:
        if (
            rule.decision_type in ("*", decision_type)
            and rule.action in candidate_ids
            and all(c.holds(state) for c in rule.conditions)
        ):
            return rule
    return None


def rule_decision(rules: list, work: Work) -> tuple[Decision, list[UsageEvent]] | None:
    """The decision and usage of the first rule that matches, or None. No rollout, shadow or exploration
    applies to a rule."""
    start = time.perf_counter()
    req = work.request
    ids = [c.id for c in req.candidates]
    rule = match(rules, req.decision_type, req.state, ids)
    if rule is None:
        return None
    nominal, ledger = nominal_tokens(work, candidate_lengths(work)), Ledger()
    ledger.add("rules", nominal, candidates=len(ids))
    latency = round((time.perf_counter() - start) * 1000, 3)
    decision = Decision(
        request_id=req.request_id,
        tier="rules",
        action_id=rule.action,
        ranking=[Ranked(id=rule.action, score=1.0)],
        confidence=1.0,
        chain=[f"rules:{rule.name}"],
        nominal_tokens=nominal,
        latency_ms=latency,
    )
    return decision, ledger.events(req, latency, "ok", 1)
