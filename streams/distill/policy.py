"""Distill policies per decision type, from streams/distill/policies.yaml (or a user's YAML file)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

import yaml


@dataclass(frozen=True)
class Policy:
    decision_type: str = "default"
    budget: int | None = 768
    keep_resolved: int = 2
    keep_informational: int = 3
    ttl: tuple[tuple[float, float], ...] = ((24, 1.0), (72, 0.6), (168, 0.3))
    ttl_floor: float = 0.1
    tag_weights: tuple[tuple[str, float], ...] = (("information", 1.0), ("other", 0.8), ("resolved", 0.6))
    exclude_terms: tuple[str, ...] = ()
    domain_terms: tuple[str, ...] = ()
    exclude_top_k: int = 5
    tagger: str = "rules"

    def ttl_weight(self, age_s: float | None) -> float:
        """Weight of a turn `age_s` seconds old; unknown age counts as fresh."""
        if age_s is None:
            return 1.0
        hours = max(age_s, 0.0) / 3600
        for max_hours, weight in self.ttl:
            if hours <= max_hours:
                return weight
        return self.ttl_floor

    def tag_weight(self, tag: str) -> float:
        return dict(self.tag_weights).get(tag, 0.5)


def _coerce(name: str, raw: dict, decision_type: str) -> dict:
    known = {f.name for f in fields(Policy)}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(
            f"distill policy {decision_type!r}: unknown keys {sorted(unknown)}; "
            f"known keys are {sorted(known - {'decision_type'})}"
        )
    out = dict(raw)
    if "ttl" in out:
        out["ttl"] = tuple(sorted((float(h), float(w)) for h, w in out["ttl"]))
    if "tag_weights" in out:
        out["tag_weights"] = tuple((str(k), float(v)) for k, v in out["tag_weights"].items())
    for key in ("exclude_terms", "domain_terms"):
        if key in out:
            out[key] = tuple(str(t).lower() for t in out[key] or ())
    if out.get("tagger", "rules") not in ("rules", "minilm"):
        raise ValueError(f"distill policy {decision_type!r} ({name}): tagger must be `rules` or `minilm`")
    return out


@functools.lru_cache(maxsize=256)
def load_policy(decision_type: str, path: str = "") -> Policy:
    """The policy of `decision_type`: `default` overlaid with the type's own entry (if any)."""
    text = Path(path).read_text() if path else resources.files("streams.distill").joinpath("policies.yaml").read_text()
    table = yaml.safe_load(text) or {}
    source = path or "bundled policies.yaml"
    merged = _coerce(source, table.get("default") or {}, "default")
    merged.update(_coerce(source, table.get(decision_type) or {}, decision_type))
    return Policy(decision_type=decision_type, **merged)
