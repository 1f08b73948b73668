# Every target builds .venv itself on a fresh machine (python3 -m venv + pip), so
# `make demo` and `make test` are the only set-up commands. constraints.txt pins this
# machine's CPU torch wheel; the package metadata itself has only lower bounds.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip
PYTEST_ARGS ?=

.PHONY: venv demo test bench lint docs clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $(STAMP)

demo: venv
	$(BIN)/python examples/ignite_recommender.py

test: venv
	$(BIN)/python -m pytest -q --durations=15 $(PYTEST_ARGS)

bench: venv
	$(BIN)/python benchmarks/run.py

# API reference from the docstrings (pdoc) into build/docs; any warning fails the build.
docs: venv
	$(BIN)/python docs/build.py --output build/docs

lint: venv
	$(BIN)/ruff check rankstream tests examples benchmarks
	$(BIN)/ruff format --check rankstream tests examples benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
