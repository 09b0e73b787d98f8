"""vLLM on a GPU (the `gpu` extra, imported lazily): candidates scored against a shared context prefix.

vLLM skips its prefix cache when prompt_logprobs is set, so likelihood scoring of the candidate tokens
would re-encode the context every time. Instead every prompt is `context + candidate + question` with the
context FIRST (so prefix caching serves it from the KV cache after the first candidate) and the score is
read from the first generated token's logprobs over two fixed labels: log P(" Yes") − log P(" No").
Measure it on your own labeled decisions before ordering tiers: small models score near chance this way.

Tokens: input = prompt tokens of every candidate; cache_read = the prompt tokens vLLM reports as served
from its prefix cache (RequestOutput.num_cached_tokens); output = 1 generated token per candidate.
"""
from __future__ import annotations

from streams import models
from streams.backends.lexical import Scored

QUESTION = "\nDoes the candidate fit the context? Answer Yes or No.\nAnswer:"
LABELS = (" Yes", " No")


def prompts(context: str, candidates: list[str], shared_prefix: bool = True) -> list[str]:
    """Context first, so every candidate's prompt shares it as a cacheable prefix (shared_prefix=False puts
    the candidate first: the layout without prefix sharing, for comparison)."""
    if shared_prefix:
        return [f"Context: {context}\nCandidate: {c}{QUESTION}" for c in candidates]
    return [f"Candidate: {c}\nContext: {context}{QUESTION}" for c in candidates]


class VLLMBackend:
    name = "vllm"
    temperature = 1.0

    def __init__(self, model: str, tokenizer: str = "", gpu_memory_utilization: float = 0.5,
                 max_model_len: int = 2048, enable_prefix_caching: bool = True, enforce_eager: bool = False):
        from vllm import SamplingParams

        self.model = model
        self.llm = models.vllm(model, tokenizer=tokenizer or model, enable_prefix_caching=enable_prefix_caching,
                               gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                               enforce_eager=enforce_eager)
        tok = self.llm.get_tokenizer()
        self.label_ids = [tok.encode(label, add_special_tokens=False)[0] for label in LABELS]
        self.params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=20)

    def score(self, context: str, candidates: list[str]) -> Scored:
        return self.score_many([(context, candidates)])[0]

    def score_many(self, items: list[tuple[str, list[str]]], shared_prefix: bool = True) -> list[Scored]:
        """One generate call for a micro-batch of decisions; vLLM's prefix cache encodes each context once."""
        flat = [p for context, cands in items for p in prompts(context, cands, shared_prefix)]
        outputs = iter(self.llm.generate(flat, self.params, use_tqdm=False))
        results = []
        for _, cands in items:
            result = Scored([])
            for out in (next(outputs) for _ in cands):
                top = out.outputs[0].logprobs[0] if out.outputs[0].logprobs else {}
                yes, no = (top[i].logprob if i in top else -100.0 for i in self.label_ids)
                result.scores.append(yes - no)
                result.input_tokens += len(out.prompt_token_ids)
                result.cache_read_tokens += getattr(out, "num_cached_tokens", 0) or 0
                result.output_tokens += len(out.outputs[0].token_ids)
            results.append(result)
        return results
