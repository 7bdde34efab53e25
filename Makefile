# The two commands of README.md:
#   make demo   set up .venv when needed, then run `obsmem demo` (the bundled sample, searched and recalled)
#   make test   set up .venv when needed, then run the whole test suite
# Setup runs again only when pyproject.toml, setup.py or the list of Python files change: a stamp file in .venv
# is keyed on their hash. The install is a strict editable one: the package is laid out as it installs (the stage
# folders inside obsmem/) as links to the working files, which static analysis tools can follow; a module added
# or removed changes the file list, so the next make lays the links anew.

PYTHON ?= python3
VENV ?= .venv
# CPU torch, installed before anything else: left to resolve on its own, torch pulls a multi-GB CUDA build.
TORCH ?= torch==2.13.0
TORCH_PIP_ARGS ?=
PYTEST_ARGS ?=

BIN := $(VENV)/bin
SETUP_HASH := $(shell { cat pyproject.toml setup.py; find obsmem retrieval pipeline indexer eval -name '*.py' | sort; } | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.obsmem-setup-$(SETUP_HASH)

# Nothing is downloaded at run time: the embedding model ships as a Python package.
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# The folder a command runs in never goes on the import path: the checkout's obsmem/ lacks the stage folders,
# which the installed package has.
export PYTHONSAFEPATH := 1

.PHONY: demo test setup

demo: $(STAMP)
	$(BIN)/obsmem demo

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

setup: $(STAMP)

$(STAMP):
	@test -x $(BIN)/python || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "obsmem needs Python 3.11 or newer: make $(or $(MAKECMDGOALS),demo) PYTHON=python3.11" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(TORCH_PIP_ARGS) '$(TORCH)'
	$(BIN)/python -m pip install -e '.[dev]' --config-settings editable_mode=strict
	rm -f $(VENV)/.obsmem-setup-*
	touch $@
