"""Token contracts: per template variable (max_tokens, required), per output (max/min tokens), per request.

Every violation is a ContractError with a reason code (for the dead-letter record) and a message that
names the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from schemas.records import Request
from streams.text import tokens
from streams.text.prompt import MeasuredContext

MAX_CONTRACT_TOKENS = 2_000_000  # larger than any model's context window: a contract above it is a typo


class ContractError(ValueError):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class VariableContract:
    max_tokens: int | None = None  # None: no contract (`jev templates lint` flags it)
    required: bool = True
    key_fields: tuple[str, ...] = ()  # fields kept when a template degrades to key fields


@dataclass(frozen=True)
class OutputContract:
    max_tokens: int
    min_tokens: int = 0


def token_limit(value: Any, what: str, *, allow_zero: bool = False) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < (0 if allow_zero else 1)
        or value > MAX_CONTRACT_TOKENS
    ):
        low = 0 if allow_zero else 1
        raise ContractError("bad_contract", f"{what}: {value!r} must be an integer from {low} to {MAX_CONTRACT_TOKENS}")
    return value


def parse_variable(name: str, spec: Any) -> VariableContract:
    spec = spec or {}
    if not isinstance(spec, dict) or set(spec) - {"max_tokens", "required", "key_fields"}:
        raise ContractError(
            "bad_contract", f"variable {name!r}: expected a mapping with max_tokens, required, key_fields; got {spec!r}"
        )
    limit = spec.get("max_tokens")
    return VariableContract(
        max_tokens=None if limit is None else token_limit(limit, f"variable {name!r} max_tokens"),
        required=bool(spec.get("required", True)),
        key_fields=tuple(spec.get("key_fields", ())),
    )


def parse_output(spec: Any) -> OutputContract:
    if not isinstance(spec, dict) or "max_tokens" not in spec:
        raise ContractError("bad_contract", f"output contract: expected {{max_tokens: N, min_tokens: M}}, got {spec!r}")
    out = OutputContract(
        token_limit(spec["max_tokens"], "output max_tokens"),
        token_limit(spec.get("min_tokens", 0), "output min_tokens", allow_zero=True),
    )
    if out.min_tokens > out.max_tokens:
        raise ContractError(
            "bad_contract", f"output contract: min_tokens {out.min_tokens} > max_tokens {out.max_tokens}"
        )
    return out


def variable_text(value: Any) -> str:
    """The text a variable contributes: strings as they are, lists one item per line, the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(variable_text(v) for v in value)
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()


def check_variables(contracts: dict[str, VariableContract], values: dict[str, Any], model: str) -> dict[str, int]:
    """Tokens per declared variable; raise on a missing required variable or one over its contract."""
    counts = {}
    for name, contract in contracts.items():
        if values.get(name) in (None, "", [], {}):
            if contract.required:
                raise ContractError(
                    "missing_variable",
                    f"template variable {name!r} is required but missing: "
                    f"pass it in template.variables (or the request field)",
                )
            counts[name] = 0
            continue
        counts[name] = tokens.count(variable_text(values[name]), model)
        if contract.max_tokens is not None and counts[name] > contract.max_tokens:
            raise ContractError(
                "over_contract",
                f"template variable {name!r} is {counts[name]} tokens, over its "
                f"contract of {contract.max_tokens}: shorten it or raise max_tokens",
            )
    return counts


def check_request(request: Request) -> None:
    """The request's own contracts must make sense before anything is counted against them."""
    c = request.contracts
    token_limit(c.max_input_tokens, "contracts.max_input_tokens")
    token_limit(c.max_output_tokens, "contracts.max_output_tokens")
    token_limit(c.min_output_tokens, "contracts.min_output_tokens", allow_zero=True)
    if c.min_output_tokens > c.max_output_tokens:
        raise ContractError(
            "bad_contract",
            f"contracts.min_output_tokens {c.min_output_tokens} > max_output_tokens {c.max_output_tokens}",
        )
    if request.deadline_ms < 0:
        raise ContractError(
            "bad_contract",
            f"deadline_ms {request.deadline_ms} is negative: send the milliseconds "
            f"the caller waits from admission, or 0 for no deadline",
        )


def fit_history(context: MeasuredContext) -> int:
    """The first history line to keep so that the context fits contracts.max_input_tokens: the newest turns
    that fit, exactly. Raises over_contract when even the state alone does not fit."""
    limit = context.request.contracts.max_input_tokens
    first = len(context.lines)
    if (used := context.tokens(first)) > limit:
        raise ContractError(
            "over_contract",
            f"state alone is {used} tokens; contracts.max_input_tokens is {limit}: "
            f"shorten the state or raise the contract",
        )
    while first > 0 and context.estimate(first - 1) <= limit:
        first -= 1
    while first < len(context.lines) and context.tokens(first) > limit:  # only where a join is not derived
        first += 1
    return first
