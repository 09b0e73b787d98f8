"""The layers of DESIGN.md "Layout and style", enforced on every import in the tree (an AST walk).

From the ground up: schemas/ and infra/ (records, topics, DDL, the broker launcher: nothing of Jev), streams/
stage logic (pure: records in, records out), the streams/ runtime (Kafka I/O, Faust agents), workers/
(processes and tools), bench/. A module may import its own layer and the ones below, never one above.

Inside streams/, the stage packages (STAGES) sit side by side above the shared concepts (prompt rendering,
budgets, idempotency, model output, usage events, and the modules at the top of streams/): a stage never imports
another stage, and nothing shared imports a stage; only the runtime that wires them (streams.app, streams.local)
reaches into several.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("schemas", "infra", "streams", "workers", "bench")
# streams/ modules that do Kafka I/O or wire agents: the runtime layer above the stage logic
RUNTIME = {"streams.app", "streams.consumer", "streams.sender", "streams.topics", "streams.kafka_tuning",
           "streams.control", "streams.local",
           "streams.usage.sink", "streams.usage.spill", "streams.budgets.leases",
           "streams.idempotency.seen_log"}
LAYER_NAMES = ["schemas/infra", "streams stage logic", "streams runtime", "workers", "bench"]
STAGES = ("ingest", "cache", "scoring", "postprocess", "shadow", "distill", "batch")
WIRING = {"streams.app", "streams.local"}  # the runtime that puts stages together
# Crossings between stages that remain, each in code another change owns (these lists shrink; a new crossing or
# one that is gone fails the test): (importing module, imported module).
KNOWN_CROSSINGS = {
    ("streams.shadow.naive", "streams.scoring.policy"),  # the naive path decides with the scoring policies
    ("streams.shadow.tuning", "streams.scoring.policy"),
    ("streams.shadow.agent", "streams.cache.semantic"),  # the guard's knob on the L2 threshold
    ("streams.postprocess.agent", "streams.shadow.verdict"),  # postprocess joins served and naive decisions
    ("streams.distill.work", "streams.cache.exact"),  # distill keys its work by the exact cache key
    ("streams.distill.minilm_tagger", "streams.cache.embedders"),  # one MiniLM embedder for cache and distill
    ("streams.answer", "streams.scoring.rule_tier"),  # answering locally runs the rule tier
}


def layer(module: str) -> int:
    top = module.split(".")[0]
    if top in ("schemas", "infra"):
        return 0
    if top == "streams":
        return 2 if module in RUNTIME or module.endswith(".agent") else 1
    return {"workers": 3, "bench": 4}[top]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def imported(tree: ast.AST, module: str, root: Path) -> list[tuple[int, str]]:
    """(line, module) for every Jev import in `tree`, relative imports resolved against `module`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(module.split(".")[:-node.level] + ([base] if base else []))
            # `from streams import sender` names a module; `from streams.sender import X` names a member
            found += [(node.lineno, f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}", root) else base)
                      for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


def violations(root: Path = ROOT) -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            own = layer(module)
            for line, target in imported(ast.parse(path.read_text(), str(path)), module, root):
                if layer(target) > own:
                    out.append(f"{path.relative_to(root)}:{line} imports {target} "
                               f"({LAYER_NAMES[own]} must not import {LAYER_NAMES[layer(target)]})")
    return out


def test_layers_import_only_downward():
    assert violations() == []


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "streams" and parts[1] in STAGES else None


def crossings(root: Path = ROOT) -> set[tuple[str, str]]:
    """(module, target) where a stage imports another stage, or a shared streams/ module imports a stage."""
    out = set()
    for path in sorted((root / "streams").rglob("*.py")):
        module = module_name(path, root)
        if module in WIRING:
            continue
        for _, target in imported(ast.parse(path.read_text(), str(path)), module, root):
            if stage_of(target) is not None and stage_of(target) != stage_of(module):
                out.add((module, target))
    return out


def test_stage_packages_never_import_one_another():
    found = crossings()
    assert found - KNOWN_CROSSINGS == set(), "a stage imports another stage (or a shared module a stage)"
    assert KNOWN_CROSSINGS - found == set(), "a known crossing is gone: take it off KNOWN_CROSSINGS"


@pytest.mark.parametrize("module, target", [
    ("streams/ingest/planted.py", "streams.postprocess.agent"),
    ("streams/budgets/planted.py", "streams.ingest.decode"),
    ("streams/planted.py", "streams.cache.stage"),
])
def test_stage_check_catches_a_planted_sideways_import(tmp_path, module, target):
    for package in ("streams", *(f"streams/{stage}" for stage in STAGES)):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
    (tmp_path / (target.replace(".", "/") + ".py")).write_text("")
    planted = tmp_path / module
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f"import {target}\n")
    assert crossings(tmp_path) == {(module.removesuffix(".py").replace("/", "."), target)}


@pytest.mark.parametrize("module, target", [
    ("streams/ingest/planted.py", "workers.pipeline"),
    ("streams/distill/planted.py", "streams.sender"),
    ("schemas/planted.py", "streams.tokens"),
])
def test_layer_check_catches_a_planted_upward_import(tmp_path, module, target):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    planted = tmp_path / module
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f"import {target}\n")
    found = violations(tmp_path)
    assert len(found) == 1 and target in found[0], found
