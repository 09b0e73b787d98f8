"""Per-decision-type scoring policy, read from decision_types.yaml (which also lists the known types)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Policy:
    coarse_k_min: int = 5
    coarse_k_max: int = 8
    mmr_lambda: float = 0.8
    escalate_below: float = 0.0
    max_iterations: int = 1
    token_cap: int = 200_000
    timeout_ms: float = 800.0
    fallback_action: str = ""
    shadow: bool = False
    rollout_percent: float = 100.0
    exploration: float = 0.0
    fine: str = ""  # a backend that is this type's fine tier in every language (empty: chosen by language)

    def __post_init__(self):
        if not 1 <= self.coarse_k_min <= self.coarse_k_max:
            raise ValueError(
                f"coarse_k_min ({self.coarse_k_min}) must be >= 1 and <= coarse_k_max ({self.coarse_k_max})"
            )
        if not 0 <= self.rollout_percent <= 100 or not 0 <= self.exploration <= 1:
            raise ValueError("rollout_percent must be within 0..100 and exploration within 0..1")


@dataclass(frozen=True)
class Config:
    tiers: dict[str, str]
    policies: dict[str, Policy]
    default: Policy

    def policy(self, decision_type: str) -> Policy:
        return self.policies.get(decision_type, self.default)

    def with_timeout(self, timeout_ms: float) -> Config:
        """The same policies with every time budget set to `timeout_ms` (an offline run against a slow model)."""
        return Config(
            self.tiers,
            {name: dataclasses.replace(p, timeout_ms=timeout_ms) for name, p in self.policies.items()},
            dataclasses.replace(self.default, timeout_ms=timeout_ms),
        )


FIELDS = {f.name for f in dataclasses.fields(Policy)}


def _policy(values: dict, where: str) -> Policy:
    unknown = set(values) - FIELDS
    if unknown:
        raise ValueError(f"{where}: unknown policy keys {sorted(unknown)}; known: {sorted(FIELDS)}")
    return Policy(**values)


def parse(text: str) -> Config:
    raw = yaml.safe_load(text) or {}
    defaults = raw.get("defaults") or {}
    default = _policy(defaults, "defaults")
    policies = {
        name: _policy({**defaults, **(values or {})}, f"decision type {name!r}")
        for name, values in (raw.get("types") or {}).items()
    }
    tiers = {
        "coarse": "lexical",
        "fine": "auto",
        "fine_multilingual": "auto",
        "escalation": "none",
        **(raw.get("tiers") or {}),
    }
    return Config(tiers=tiers, policies=policies, default=default)


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> Config:
    """The bundled decision_types.yaml, or the file at `path` (settings.decision_types)."""
    if path:
        return parse(Path(path).read_text())
    return parse(resources.files("streams.scoring").joinpath("decision_types.yaml").read_text())


def known_decision_types(path: str = "") -> set[str]:
    """Decision types the pipeline accepts; ingest rejects the others."""
    return set(load(path).policies)
