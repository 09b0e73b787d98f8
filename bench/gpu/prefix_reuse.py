"""GPU scoring with and without a shared-context prefix, on the device's own torch + transformers.

The device reaches no network, so this measures the CPU fine backend's scoring method (streams/models/smollm2.py:
the context's KV computed once, repeated across the candidates) on a randomly initialised model of SmolLM2-135M's
shape in bf16: speed does not depend on the weights, and accuracy is not measured. Per micro-batch of B requests ×
N candidates, `shared` against `separate` (every context+candidate its own sequence). Prints one JSON object
(candidates_per_s and p99 batch latency per mode, speedup, prefix-cache hit rate).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=16, help="requests per micro-batch (B)")
    p.add_argument("--candidates", type=int, default=20, help="candidates per request (N)")
    p.add_argument("--context", type=int, default=512, help="context tokens per request")
    p.add_argument("--candidate-tokens", type=int, default=16)
    p.add_argument("--iters", type=int, default=30)
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print(json.dumps({"skipped": "torch not installed"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "no GPU"}))
        return 0
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    )  # SmolLM2-135M's shape
    lm = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    B, N, C, K = args.requests, args.candidates, args.context, args.candidate_tokens
    contexts = torch.randint(0, 49152, (B, C), device="cuda")
    cands = torch.randint(0, 49152, (B * N, K), device="cuda")

    def shared():
        with torch.no_grad():
            out = lm(contexts, use_cache=True)
            cache = out.past_key_values
            cache.batch_repeat_interleave(N)
            logits = lm(cands, past_key_values=cache, use_cache=True).logits
            return torch.log_softmax(logits.float(), -1).sum().item()

    def separate():
        full = torch.cat([contexts.repeat_interleave(N, 0), cands], 1)
        with torch.no_grad():
            total = 0.0
            for start in range(0, B * N, 64):
                logits = lm(full[start : start + 64], logits_to_keep=K + 1).logits
                total += torch.log_softmax(logits.float(), -1).sum().item()
            return total

    results = {}
    for name, fn in (("shared", shared), ("separate", separate)):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        results[name] = {
            "candidates_per_s": round(B * N * len(times) / sum(times), 1),
            "p99_batch_ms": round(1000 * percentile(times, 0.99), 2),
            "p50_batch_ms": round(1000 * percentile(times, 0.5), 2),
        }
        print(f"{name}: {results[name]}", file=sys.stderr)
    attended = B * N * (C + K)
    summary = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "model": "random-init SmolLM2-135M architecture, bf16",
        "requests_per_batch": B,
        "candidates": N,
        "context_tokens": C,
        "candidate_tokens": K,
        "candidates_per_s_shared": results["shared"]["candidates_per_s"],
        "candidates_per_s_separate": results["separate"]["candidates_per_s"],
        "p99_batch_ms_shared": results["shared"]["p99_batch_ms"],
        "p99_batch_ms_separate": results["separate"]["p99_batch_ms"],
        "speedup": round(results["shared"]["candidates_per_s"] / results["separate"]["candidates_per_s"], 2),
        "prefix_cache_hit_rate": round(B * (N - 1) * C / attended, 4),
    }
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "prefix_reuse.json"), "w") as f:
            json.dump(summary, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
