"""The model pool: every model Jev may call, as configuration (JEV_MODELS, a YAML file; the bundled models.yaml by
default). Tiers in decision_types.yaml and the generator name entries of it.

An entry names its engine (streams/models/registry.py), model, server and API key source (the key is read when a
call needs it, never printed), tokenizer, prices, context length and channel. Loading a pool registers each
model's tokenizer and prices, so its usage rows are counted and priced as configured.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path

import yaml

from streams.models import pricing
from streams.text import tokens

CHANNELS = ("fast", "balanced", "precise")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    engine: str
    model: str = ""
    base_url: str = ""
    api_key_env: str = ""
    api_key_file: str = ""
    tokenizer: str = ""
    price_per_million: dict = field(default_factory=dict)
    context_length: int = 0
    channel: str = "balanced"
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.channel not in CHANNELS:
            raise ValueError(f"model {self.name!r}: channel {self.channel!r} is not one of {', '.join(CHANNELS)}")
        unknown = set(self.price_per_million) - {"input", "cached_input", "output"}
        if unknown:
            raise ValueError(
                f"model {self.name!r}: price_per_million takes input, cached_input and output "
                f"(USD per million tokens), not {sorted(unknown)}"
            )
        if self.api_key_env and self.api_key_file:
            raise ValueError(f"model {self.name!r}: give api_key_env or api_key_file, not both")

    @property
    def served_model(self) -> str:
        """The model's name at its engine (the `model` field, else the entry's name)."""
        return self.model or self.name

    def api_key(self) -> str:
        """The key from its source, read now (a rotated key file is picked up); "" when the model has none."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env, "")
            if not key:
                raise RuntimeError(
                    f"model {self.name!r}: environment variable {self.api_key_env} is empty; export the API key there"
                )
            return key
        if self.api_key_file:
            try:
                return Path(self.api_key_file).read_text().strip()
            except OSError as exc:
                raise RuntimeError(f"model {self.name!r}: cannot read its api_key_file ({exc.strerror})") from None
        return ""

    def __repr__(self) -> str:  # never the key; only where it comes from
        return (
            f"ModelSpec(name={self.name!r}, engine={self.engine!r}, model={self.served_model!r}, "
            f"base_url={self.base_url!r}, channel={self.channel!r})"
        )


FIELDS = {f.name for f in fields(ModelSpec)}


def spec(name: str, values: dict) -> ModelSpec:
    unknown = set(values) - FIELDS
    if unknown:
        raise ValueError(f"model {name!r}: unknown keys {sorted(unknown)}; known: {sorted(FIELDS - {'name'})}")
    if "engine" not in values:
        raise ValueError(f"model {name!r}: name its engine (lexical, minilm, smollm2, vllm, extractive, openai)")
    return ModelSpec(name=name, **values)


@dataclass(frozen=True)
class Pool:
    models: dict[str, ModelSpec]

    def __getitem__(self, name: str) -> ModelSpec:
        if name not in self.models:
            raise KeyError(f"model {name!r} is not in the model pool (JEV_MODELS); it has {', '.join(self.models)}")
        return self.models[name]

    def __contains__(self, name: str) -> bool:
        return name in self.models

    def with_model(self, entry: ModelSpec) -> Pool:
        return Pool({**self.models, entry.name: register(entry)})


def register(entry: ModelSpec) -> ModelSpec:
    """The entry's tokenizer and prices into the token counter and the price table, under its name (what usage
    rows of the openai engine carry) and its served model's."""
    names = {entry.name, entry.served_model}
    for name in names:
        if entry.tokenizer and entry.engine != "extractive":
            tokens.register(name, entry.tokenizer)
        if entry.price_per_million:
            p = entry.price_per_million
            pricing.register(
                name, p.get("input", 0.0), p.get("cached_input", p.get("input", 0.0)), p.get("output", 0.0)
            )
    return entry


def parse(text: str, where: str = "models.yaml") -> Pool:
    raw = yaml.safe_load(text) or {}
    entries = raw.get("models")
    if not isinstance(entries, dict) or not entries:
        raise ValueError(f"{where}: expected a `models:` mapping of name → {{engine: ..., ...}}")
    return Pool({name: register(spec(name, values or {})) for name, values in entries.items()})


@functools.lru_cache(maxsize=8)
def load(path: str = "") -> Pool:
    """The bundled pool, or the file at `path` (settings.models)."""
    if path:
        return parse(Path(path).read_text(), path)
    return parse(resources.files("streams.models").joinpath("models.yaml").read_text())
