"""A GGUF model file's own tokenizer, built from its metadata (`tokenizer.ggml.*`), for Jev's count of a model that a
llama.cpp server runs (tokenizer spec `gguf:<file>`, parsed in streams/text/tokens.py).

Only the file's key-value header is read, and nothing is downloaded. The vocabulary and merges become a byte-level
BPE with the pre-tokenizer llama.cpp applies for the file's `tokenizer.ggml.pre` (`smollm`, `default`/`gpt2`); other
kinds raise an error that names the fix (a tokenizer.json through `hf:<dir>`). `chat_framing` is what the chat
template adds around one user message, which a server bills as prompt tokens of every chat call.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"GGUF"
# GGUF value types: fixed-size scalars (struct format), 8 = string, 9 = array
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
PRE_TOKENIZERS = ("default", "gpt2", "smollm")
CONTROL = 3  # tokenizer.ggml.token_type of special tokens (<|im_start|>, <|endoftext|>, ...)


class Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        size = self.take("Q")
        self.at += size
        return self.data[self.at - size : self.at].decode("utf-8", errors="replace")

    def value(self, kind: int):
        if kind in SCALARS:
            return self.take(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            item, count = self.take("I"), self.take("Q")
            if item in SCALARS:
                fmt = SCALARS[item]
                values = list(struct.unpack_from(f"<{count}{fmt}", self.data, self.at))
                self.at += count * struct.calcsize(fmt)
                return values
            return [self.value(item) for _ in range(count)]
        raise ValueError(f"unknown GGUF value type {kind}")


def metadata(path: str | Path, prefix: str = "tokenizer.") -> dict:
    """The header's key-value pairs whose keys start with `prefix` (the rest are skipped over, not kept)."""
    path = Path(path)
    with path.open("rb") as f:
        head = f.read(24)
        if len(head) < 24 or head[:4] != MAGIC:
            raise ValueError(f"{path}: not a GGUF file (no GGUF magic)")
        version, _tensors, count = struct.unpack("<IQQ", head[4:])
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old (2 or later)")
        size = 1 << 22
        while True:  # the header's length is not stored: read more until every pair parses
            f.seek(0)
            reader = Reader(f.read(size))
            reader.at = 24
            try:
                found = {}
                for _ in range(count):
                    key = reader.string()
                    value = reader.value(reader.take("I"))
                    if key.startswith(prefix):
                        found[key] = value
                return found
            except struct.error:
                if size > path.stat().st_size:
                    raise ValueError(f"{path}: truncated GGUF header") from None
                size *= 4


@dataclass(frozen=True)
class Vocabulary:
    tokenizer: object  # a tokenizers.Tokenizer
    chat_framing: int  # tokens the chat template adds around one user message (0: the file has no template)


def load(path: str | Path) -> Vocabulary:
    """The file's tokenizer and its chat framing, from one read of its header."""
    meta = metadata(path)
    tok = tokenizer(path, meta)
    return Vocabulary(tok, chat_framing(meta, tok))


def tokenizer(path: str | Path, meta: dict | None = None):
    """A `tokenizers.Tokenizer` equal to the one llama.cpp builds from the file (special tokens included)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    meta = meta if meta is not None else metadata(path)
    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2" or pre not in PRE_TOKENIZERS:
        raise ValueError(
            f"gguf:{path}: Jev reads byte-level BPE vocabularies (tokenizer.ggml.model gpt2, pre "
            f"{', '.join(PRE_TOKENIZERS)}), this file has {kind}/{pre}; give the model's tokenizer.json "
            f"instead as tokenizer: hf:<dir holding tokenizer.json>"
        )
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.pre_tokenizer = (
        pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        if pre == "smollm"
        else byte_level
    )
    tok.decoder = decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", [])
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, kind in zip(tokens, types) if kind == CONTROL]
    )
    return tok


def chat_framing(meta: dict, tok) -> int:
    """Tokens the chat template in `meta` adds to one user message with the assistant's turn opened (0 without
    one), its special tokens one each as the server parses them."""
    import jinja2.sandbox

    template = meta.get("tokenizer.chat_template")
    if not template:
        return 0
    vocab = meta["tokenizer.ggml.tokens"]

    def special(key: str) -> str:
        return vocab[meta[key]] if key in meta else ""

    text = (
        jinja2.sandbox.ImmutableSandboxedEnvironment()
        .from_string(template)
        .render(
            messages=[{"role": "user", "content": ""}],
            add_generation_prompt=True,
            bos_token=special("tokenizer.ggml.bos_token_id"),
            eos_token=special("tokenizer.ggml.eos_token_id"),
        )
    )
    return len(tok.encode(text, add_special_tokens=False).ids)
