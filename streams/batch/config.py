"""Batch templates and per-kind field priorities, read from YAML (the bundled streams/batch/templates.yaml)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

BUNDLED = Path(__file__).with_name("templates.yaml")


@dataclass(frozen=True)
class BatchTemplate:
    id: str
    instructions: str
    sections: tuple[tuple[str, str], ...]  # (name, what it holds), in answer order
    output_tokens: int
    essential: frozenset[str]


@dataclass(frozen=True)
class BatchConfig:
    templates: dict[str, BatchTemplate]
    drop_order: dict[str, tuple[str, ...]]  # kind → fields it drops first

    def template(self, template_id: str) -> BatchTemplate:
        if template_id not in self.templates:
            raise KeyError(
                f"unknown batch template {template_id!r}: known are {', '.join(sorted(self.templates))} "
                f"(add it to the file named by JEV_BATCH_TEMPLATES)"
            )
        return self.templates[template_id]

    def drops(self, kind: str) -> tuple[str, ...]:
        return self.drop_order.get(kind, self.drop_order.get("default", ()))


def parse(raw: dict, source: str = "") -> BatchConfig:
    try:
        templates = {
            tid: BatchTemplate(
                tid,
                " ".join(str(t["instructions"]).split()),
                tuple((str(k), str(v)) for k, v in t["sections"].items()),
                int(t.get("output_tokens", 120)),
                frozenset(t.get("essential", ())),
            )
            for tid, t in raw["templates"].items()
        }
        kinds = {kind: tuple(spec.get("drop", ())) for kind, spec in (raw.get("kinds") or {}).items()}
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"batch templates {source or '<dict>'}: {exc!r}; expected templates: {{id: {{instructions, "
            f"sections: {{Name: description}}, output_tokens, essential}}}} and kinds: "
            f"{{kind: {{drop: [field, ...]}}}}"
        ) from None
    for t in templates.values():
        if not t.sections:
            raise ValueError(f"batch template {t.id!r} in {source}: needs at least one section")
    return BatchConfig(templates, kinds)


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> BatchConfig:
    file = Path(path) if path else BUNDLED
    if not file.exists():
        raise FileNotFoundError(f"batch templates file {file} not found (JEV_BATCH_TEMPLATES)")
    return parse(yaml.safe_load(file.read_text()), str(file))
