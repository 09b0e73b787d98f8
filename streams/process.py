"""Process tuning for the long-running workers: CPU model threads, and the garbage collector's view of the
start-up heap."""
from __future__ import annotations

import gc
import importlib.util


def limit_model_threads(n: int) -> None:
    """Two processes (the stages' L2 embedder and a scoring worker) each using every core oversubscribe a small
    machine; one torch thread each measured fastest here (see JEV_MODEL_THREADS)."""
    if n > 0 and importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(n)


def freeze_heap() -> None:
    """Move everything alive after start-up (models, tokenizers, Faust's services) out of the collector's reach.
    A full collection scans every tracked object: 30-186 ms each in the stages process while it started, 1.6 ms
    for the first one after the freeze. Call once, when a worker is ready."""
    gc.collect()
    gc.freeze()
