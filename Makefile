# Every target builds .venv itself on a fresh machine (python3 -m venv + pip), so
# `make demo` and `make test` are the only set-up commands. constraints.txt pins this
# machine's CPU torch wheel; the package metadata itself has only lower bounds.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip
PYTEST_ARGS ?=

.PHONY: venv demo test test-core test-keras-torch test-keras-jax test-keras-tensorflow bench bench-spark lint docs clean

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

# The whole suite, one pytest run after the other (never side by side: two cores are often
# shared): the core, Ignite, PyKEEN and distributed tests, then the Keras suite once per backend
# (KERAS_BACKEND is fixed when keras is imported). Each prints its own progress, summary and
# slowest tests; every run goes ahead when one fails, and `make test` fails if any did.
KERAS_BACKENDS := torch jax tensorflow

test: venv
	@failed=""; \
	$(MAKE) --no-print-directory test-core || failed="$$failed core"; \
	for b in $(KERAS_BACKENDS); do \
		$(MAKE) --no-print-directory test-keras-$$b || failed="$$failed keras-$$b"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: all suites passed (core, keras on $(KERAS_BACKENDS))"

test-core: venv
	@echo "== make test: core, Ignite, PyKEEN and distributed suites"
	$(BIN)/python -m pytest -q --durations=15 $(PYTEST_ARGS)

$(addprefix test-keras-,$(KERAS_BACKENDS)): test-keras-%: venv
	@echo "== make test: Keras suite on the $* backend"
	KERAS_BACKEND=$* RANKSTREAM_KERAS_SUITE=1 PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=3 \
		$(BIN)/python -m pytest tests/keras/backend_suite -q --durations=10 $(PYTEST_ARGS)

bench: venv
	$(BIN)/python benchmarks/run.py

# rankstream.spark against Spark's RankingMetrics and RankingEvaluator on one Parquet DataFrame:
# 1,000,000 queries x 100 candidates on local[2] (needs Java 17; about 20 minutes, most of them
# RankingMetrics'), markdown on stdout.
# A quicker run: make bench-spark BENCH_SPARK_ARGS="--queries 50000"
bench-spark: venv
	$(BIN)/python benchmarks/bench_spark.py $(BENCH_SPARK_ARGS)

# API reference from the docstrings (pdoc) into build/docs; any warning fails the build.
docs: venv
	$(BIN)/python docs/build.py --output build/docs

lint: venv
	$(BIN)/ruff check rankstream tests examples benchmarks
	$(BIN)/ruff format --check rankstream tests examples benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
