"""The layers, as folders, enforced on every import in the tree (an AST walk).

From the ground up: schemas/ and infra/ (records, topics, DDL, the broker launcher: nothing of Jev); the shared
concepts of streams/ (core, text, security, models, budgets, idempotency, output, usage); the stage packages
(ingest, distill, cache, scoring, postprocess, shadow, batch: pure, records in, records out); streams/runtime/
(everything that touches Kafka or wires the stages: the app, consumer, sender, agents); workers/ (processes,
cli, analytics, harness, planner); bench/. A module may import its own layer and the ones below, never one above.

A stage never imports another stage; only streams/runtime/ reaches into several.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGES = ("schemas", "infra", "streams", "workers", "bench")
LAYER_NAMES = ["schemas/infra", "streams shared concepts", "streams stages", "streams runtime", "workers", "bench"]
STAGES = ("ingest", "cache", "scoring", "postprocess", "shadow", "distill", "batch")
WORKER_KINDS = ("processes", "cli", "analytics", "harness", "planner")
# Crossings between stages that remain, each in code another change owns (these lists shrink; a new crossing or
# one that is gone fails the test): (importing module, imported module).
KNOWN_CROSSINGS = {
    ("streams.shadow.naive", "streams.scoring.policy"),  # the naive path decides with the scoring policies
    ("streams.shadow.tuning", "streams.scoring.policy"),
    ("streams.distill.work", "streams.cache.exact"),  # distill keys its work by the exact cache key
    ("streams.distill.minilm_tagger", "streams.cache.embedders"),  # one MiniLM embedder for cache and distill
}


def layer(module: str) -> int:
    parts = module.split(".")
    if parts[0] in ("schemas", "infra"):
        return 0
    if parts[0] == "streams":
        if len(parts) == 1 or parts[1] == "settings":
            return 0
        if parts[1] == "runtime":
            return 3
        return 2 if parts[1] in STAGES else 1
    return {"workers": 4, "bench": 5}[parts[0]]


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
                base = ".".join(module.split(".")[: -node.level] + ([base] if base else []))
            # `from streams import sender` names a module; `from streams.runtime.sender import X` names a member
            found += [
                (node.lineno, f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}", root) else base)
                for alias in node.names
            ]
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


def violations(root: Path = ROOT) -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = module_name(path, root)
            own = layer(module)
            for line, target in imported(ast.parse(path.read_text(), str(path)), module, root):
                if layer(target) > own:
                    out.append(
                        f"{path.relative_to(root)}:{line} imports {target} "
                        f"({LAYER_NAMES[own]} must not import {LAYER_NAMES[layer(target)]})"
                    )
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
        if module.startswith("streams.runtime"):
            continue
        for _, target in imported(ast.parse(path.read_text(), str(path)), module, root):
            if stage_of(target) is not None and stage_of(target) != stage_of(module):
                out.add((module, target))
    return out


def test_stage_packages_never_import_one_another():
    found = crossings()
    assert found - KNOWN_CROSSINGS == set(), "a stage imports another stage (or a shared module a stage)"
    assert KNOWN_CROSSINGS - found == set(), "a known crossing is gone: take it off KNOWN_CROSSINGS"


@pytest.mark.parametrize(
    "module, target",
    [
        ("streams/ingest/planted.py", "streams.postprocess.finalize"),
        ("streams/scoring/planted.py", "streams.cache.stage"),
    ],
)
def test_stage_check_catches_a_planted_sideways_import(tmp_path, module, target):
    for package in ("streams", *(f"streams/{stage}" for stage in STAGES)):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
    (tmp_path / (target.replace(".", "/") + ".py")).write_text("")
    planted = tmp_path / module
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f"import {target}\n")
    assert crossings(tmp_path) == {(module.removesuffix(".py").replace("/", "."), target)}


@pytest.mark.parametrize(
    "module, target",
    [
        ("streams/ingest/planted.py", "workers.harness.pipeline"),
        ("streams/distill/planted.py", "streams.runtime.sender"),
        ("streams/core/planted.py", "streams.ingest.decode"),
        ("streams/text/planted.py", "streams.runtime.app"),
        ("schemas/planted.py", "streams.text.tokens"),
    ],
)
def test_layer_check_catches_a_planted_upward_import(tmp_path, module, target):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    planted = tmp_path / module
    planted.parent.mkdir(parents=True, exist_ok=True)
    planted.write_text(f"import {target}\n")
    found = violations(tmp_path)
    assert len(found) == 1 and target in found[0], found


def test_streams_holds_no_loose_module_but_its_settings():
    loose = {p.name for p in (ROOT / "streams").glob("*.py")}
    assert loose == {"__init__.py", "settings.py"}, sorted(loose - {"__init__.py", "settings.py"})


def test_workers_are_split_by_kind():
    loose = {p.name for p in (ROOT / "workers").glob("*.py")} - {"__init__.py"}
    folders = {p.name for p in (ROOT / "workers").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert loose == set() and folders == set(WORKER_KINDS), (loose, folders)


def test_only_the_runtime_imports_kafka():
    found = []
    for path in sorted((ROOT / "streams").rglob("*.py")):
        module = module_name(path, ROOT)
        if module.startswith("streams.runtime"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            found += [f"{module} imports {n}" for n in names if n.split(".")[0] in ("faust", "aiokafka")]
    assert found == []
