"""vLLM in-process (imported lazily): scoring candidates against a shared context prefix, and generation (greedy
chat completion, streamed by stepping the engine). On a GPU with the `gpu` extra; on a CPU with vLLM's CPU build
(`make vllm` builds .venv-vllm, where a scoring worker runs with JEV_BACKEND=vllm:/model/dir).

vLLM skips its prefix cache when prompt_logprobs is set, so each prompt is `context + candidate + question`, the
context first so the prefix cache serves it, and the score is log P(" Yes") − log P(" No") of the first generated
token. Small models score near chance this way: measure on your own labelled decisions before ordering tiers.
"""

from __future__ import annotations

import threading
import time

from streams.models import loaded as models
from streams.models.protocol import Generated, Scored, Streaming

QUESTION = "\nDoes the candidate fit the context? Answer Yes or No.\nAnswer:"
LABELS = (" Yes", " No")


def prompts(context: str, candidates: list[str], shared_prefix: bool = True) -> list[str]:
    """Context first, so every candidate's prompt shares it as a cacheable prefix (shared_prefix=False puts
    the candidate first: the layout without prefix sharing, for comparison)."""
    if shared_prefix:
        return [f"Context: {context}\nCandidate: {c}{QUESTION}" for c in candidates]
    return [f"Candidate: {c}\nContext: {context}{QUESTION}" for c in candidates]


def engine(model: str, max_model_len: int, **options):
    """The process's one vLLM engine for the model directory `model`, prefix caching on. On a CPU: eager (the
    compiled graph takes minutes to build and is not reused between starts), float32 (in bf16 greedy output
    departs from the transformers reference on ties) and 32-token blocks (the CPU attention's unit, so whole blocks of a
    shared state are reused); on a GPU half its memory. `options` (vllm.LLM keyword arguments) override these."""
    import torch

    defaults: dict = {"enable_prefix_caching": True, "max_model_len": max_model_len, "tokenizer": model}
    if torch.cuda.is_available():
        defaults["gpu_memory_utilization"] = 0.5
    else:
        defaults.update(enforce_eager=True, dtype="float32", block_size=32)
    return models.vllm(model, **{**defaults, **options})


class VLLMBackend:
    name = "vllm"
    temperature = 1.0

    def __init__(self, model: str, max_model_len: int = 4096, **options):
        from vllm import SamplingParams

        self.model = model
        self.llm = engine(model, max_model_len, **options)
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


class VLLMGenerator:
    """Greedy chat completion of one prompt on the process's vLLM engine."""

    name = "vllm"
    label = "llm"

    def __init__(self, model: str, max_model_len: int = 4096, **options):
        from vllm import SamplingParams

        self.model = model
        self.params = SamplingParams
        self.llm = engine(model, max_model_len, **options)
        self.lock = threading.Lock()  # streams step the engine one at a time
        self.latest: dict = {}  # request id → its latest output, taken by that request's stream

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        params = self.params(max_tokens=max_tokens, temperature=0.0)
        out = self.llm.chat([{"role": "user", "content": prompt}], params, use_tqdm=False)[0]
        return Generated(
            out.outputs[0].text.strip(),
            len(out.prompt_token_ids),
            len(out.outputs[0].token_ids),
            self.model,
            self.label,
            (time.perf_counter() - started) * 1000,
        )

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        """vLLM's engine stepped one iteration at a time, each step giving this request's text so far (and its
        tokens: the stream's output tokens). Steps of concurrent streams are serialized by a lock; a step's outputs
        for other requests are kept for them."""
        engine = self.llm.llm_engine
        tokenizer = self.llm.get_tokenizer()
        text_prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        request_id = f"jev-stream-{time.monotonic_ns()}-{threading.get_ident()}"
        with self.lock:
            engine.add_request(request_id, text_prompt, self.params(max_tokens=max_tokens, temperature=0.0))

        def pieces():
            sent, finished = 0, False
            try:
                while not finished:
                    with self.lock:
                        if request_id not in self.latest:
                            self.latest.update((out.request_id, out) for out in engine.step())
                        out = self.latest.pop(request_id, None)
                    if out is None:
                        continue
                    text, finished = out.outputs[0].text, out.finished
                    streaming.output_tokens = len(out.outputs[0].token_ids)
                    if len(text) > sent:
                        yield text[sent:]
                        sent = len(text)
            finally:
                if not finished:
                    with self.lock:
                        engine.abort_request([request_id])
                        self.latest.pop(request_id, None)

        streaming = Streaming(pieces(), len(tokenizer.encode(text_prompt)), self.model, self.label, output_tokens=0)
        return streaming


def require_dir(spec) -> str:
    if not spec.model:
        raise RuntimeError(
            f"model {spec.name!r} (engine vllm) needs a local model directory: name it as "
            "vllm:/path/to/model or set `model:` in the pool"
        )
    return spec.model


def scorer(spec) -> VLLMBackend:
    return VLLMBackend(require_dir(spec))


def generator(spec) -> VLLMGenerator:
    return VLLMGenerator(require_dir(spec))
