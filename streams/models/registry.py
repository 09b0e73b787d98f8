"""Engines by name: one line per engine. An engine module holds `scorer(spec)` and/or `generator(spec)`, each
building it from a model pool entry (streams/models/pool.py); modules import their model stacks lazily, so the
base install runs with the lexical and extractive engines alone. Adding an engine: one file, one line here.

`scorer(name)` and `generator(name)` take a pool entry's name, `auto` (the best one installed), or
`ENGINE:MODEL` for an entry made on the spot (`vllm:/path/to/model`, `openai:http://host:8000/v1`).
"""

from __future__ import annotations

import dataclasses
import importlib

from streams.models import loaded as models
from streams.models import pool as pool_mod
from streams.models.protocol import Generator, Scorer

ENGINES = {  # engine → (module, the extra its models need: streams/models/loaded.py)
    "lexical": ("streams.models.lexical", ""),
    "minilm": ("streams.models.embeddings", "minilm"),
    "e5": ("streams.models.e5", "e5"),
    "smollm2": ("streams.models.smollm2", "smollm2"),
    "vllm": ("streams.models.vllm", "vllm"),
    "extractive": ("streams.models.extractive", ""),
    "openai": ("streams.models.openai", ""),
}


def resolve(name: str, pool: pool_mod.Pool | None, role: str) -> pool_mod.ModelSpec:
    pool = pool or pool_mod.load()
    if name in pool:
        return pool[name]
    engine, sep, model = name.partition(":")
    if sep and engine in ENGINES:
        if engine == "openai":
            return pool_mod.ModelSpec(
                name="openai@" + model.split("://", 1)[-1].split("/", 1)[0], engine="openai", base_url=model
            )
        return pool_mod.ModelSpec(name=name, engine=engine, model=model)
    raise ValueError(
        f"unknown {role} {name!r}: choose auto, a model of the pool ({', '.join(pool.models)}), "
        f"vllm:/path/to/model or openai:http://host:port/v1"
    )


def build(entry: pool_mod.ModelSpec, role: str):
    if entry.engine not in ENGINES:
        raise ValueError(f"model {entry.name!r}: unknown engine {entry.engine!r}; known: {', '.join(ENGINES)}")
    module, extra = ENGINES[entry.engine]
    if extra:
        models.require(extra, role)
    factory = getattr(importlib.import_module(module), role, None)
    if factory is None:
        raise ValueError(f"model {entry.name!r}: engine {entry.engine!r} has no {role}")
    return factory(entry)


def scorer(name: str, pool: pool_mod.Pool | None = None) -> Scorer:
    """The scorer behind a tier name; `auto` is minilm when the embed extra is installed, else lexical."""
    if name == "auto":
        name = "minilm" if models.available("minilm") else "lexical"
    return build(resolve(name, pool, "scorer"), "scorer")


def generator(name: str, pool: pool_mod.Pool | None = None, count_model: str = "gpt-4o-mini") -> Generator:
    """The generator by name; `auto` is smollm2 when the cpu-llm extra is installed, else extractive. The
    extractive one counts in `count_model`'s tokenizer unless its entry names one. Several pool names, comma
    separated, give a router over their channels (streams/models/router.py)."""
    if "," in name:
        from streams.models.router import Router

        names = [n.strip() for n in name.split(",") if n.strip()]
        entries = [resolve(n, pool, "generator") for n in names]
        channels = [e.channel for e in entries]
        if len(set(channels)) < len(channels):
            raise ValueError(f"generators {', '.join(names)}: one model per channel (they have {channels})")
        return Router({e.channel: generator(n, pool, count_model) for n, e in zip(names, entries)})
    if name == "auto":
        name = "smollm2" if models.available("smollm2") else "extractive"
    entry = resolve(name, pool, "generator")
    if entry.engine == "extractive" and not entry.tokenizer:
        entry = dataclasses.replace(entry, tokenizer=count_model)
    return build(entry, "generator")
