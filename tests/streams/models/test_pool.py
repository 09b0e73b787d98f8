"""The model pool: entries as configuration, keys never shown, prices and tokenizers registered, clear errors."""

import logging

import pytest

from streams.models import pool as pool_mod
from streams.models import pricing, registry
from streams.text import tokens

POOL = """
models:
  qwen-7b:
    engine: openai
    model: Qwen/Qwen2.5-7B-Instruct
    base_url: http://127.0.0.1:8000/v1
    api_key_env: JEV_TEST_POOL_KEY
    tokenizer: cl100k_base
    price_per_million: {input: 0.2, cached_input: 0.05, output: 0.6}
    context_length: 32768
    channel: balanced
  lexical: {engine: lexical, channel: fast}
"""


def test_the_bundled_pool_reproduces_the_built_in_tiers():
    pool = pool_mod.load()
    assert {"lexical", "minilm", "smollm2", "extractive"} <= set(pool.models)
    assert registry.scorer("lexical", pool).name == "lexical"
    assert registry.generator("extractive", pool, "gpt-4o-mini").label == "extractive"


def test_an_entry_registers_its_prices_and_tokenizer(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text(POOL)
    pool = pool_mod.load(str(path))
    entry = pool["qwen-7b"]
    assert entry.channel == "balanced" and entry.context_length == 32768
    assert pricing.cost("qwen-7b", 1_000_000, 0, 0) == pytest.approx(0.2)
    assert pricing.cost("Qwen/Qwen2.5-7B-Instruct", 1_000_000, 1_000_000, 0) == pytest.approx(0.05)
    assert tokens.count("hello world 你好", "qwen-7b") == tokens.count("hello world 你好", "cl100k_base")


def test_the_api_key_is_read_from_its_source_and_never_shown(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("JEV_TEST_POOL_KEY", "sk-very-secret")
    entry = pool_mod.parse(POOL)["qwen-7b"]
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("jev.test").info("pool entry %s", entry)
    assert entry.api_key() == "sk-very-secret"
    assert "sk-very-secret" not in repr(entry) and "sk-very-secret" not in caplog.text
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n")
    assert pool_mod.ModelSpec(name="m", engine="openai", api_key_file=str(key_file)).api_key() == "sk-from-file"
    monkeypatch.delenv("JEV_TEST_POOL_KEY")
    with pytest.raises(RuntimeError, match="JEV_TEST_POOL_KEY is empty"):
        entry.api_key()


@pytest.mark.parametrize(
    "text, message",
    [
        ("models: {m: {engine: openai, channel: turbo}}", "channel 'turbo'"),
        ("models: {m: {engine: openai, price: 1}}", "unknown keys \\['price'\\]"),
        ("models: {m: {channel: fast}}", "name its engine"),
        ("models: []", "expected a `models:` mapping"),
        ("models: {m: {engine: openai, price_per_million: {in: 1}}}", "price_per_million takes"),
    ],
)
def test_bad_pools_say_what_to_fix(text, message):
    with pytest.raises(ValueError, match=message):
        pool_mod.parse(text)
