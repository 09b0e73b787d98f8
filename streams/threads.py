"""CPU model threads per process. Two processes (the stages' L2 embedder and a scoring worker) each using
every core oversubscribe a small machine; one torch thread each measured fastest here (see JEV_MODEL_THREADS)."""
from __future__ import annotations

import importlib.util


def limit_model_threads(n: int) -> None:
    if n > 0 and importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(n)
