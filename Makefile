# Every target builds .venv itself on a fresh machine (python3 -m venv + pip), in two steps:
# `make demo` installs only what the demo needs (rankstream[ignite,examples]: torch,
# pytorch-ignite, matplotlib, tqdm) and runs it; `make test` and every other target (venv, bench,
# bench-spark, docs, lint, test-*) add the dev extra on top (the test peers, Keras with JAX and
# TensorFlow, pyspark, pdoc, ruff). Each step leaves a stamp in .venv and is redone when
# pyproject.toml or constraints.txt changes. constraints.txt pins this machine's CPU torch wheel
# for every install; the package metadata itself has only lower bounds.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.demo-installed
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip
# The extras `make demo` installs (tests/test_packaging.py runs the demo with nothing else).
DEMO_EXTRAS := ignite,examples
# The torch version constraints.txt pins, checked after each install.
TORCH_PIN := $(shell sed -n 's/^torch==//p' constraints.txt)
CHECK_TORCH := $(BIN)/python -c "import torch; assert torch.__version__.split('+')[0] == '$(TORCH_PIN)', torch.__version__"
PYTEST_ARGS ?=
# Each suite runs its test files on this many processes (pytest-xdist): whole files per process,
# so a file's module-level caches, Spark session or gloo world are made once, in the order
# collected, so the few long distributed tests (tests/keras/) start first.
TEST_WORKERS ?= 2
# XLA (JAX, and TensorFlow's jit_compile) compiles the tests' many small programs (JAX compiles
# each eager operation once per shape) the cheap way: without LLVM's backend optimisations, with
# the classic elemental emitters in one LLVM module and the classic runtime. Measured on two
# Keras test files per backend: 30% less CPU on JAX, 18% on TensorFlow, the same numbers (these
# change how code is generated, not what is computed; tests compare with tolerances). Empty it
# to test XLA's defaults.
TEST_XLA_FLAGS ?= --xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false \
	--xla_cpu_parallel_codegen_split_count=1 --xla_cpu_use_thunk_runtime=false
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: venv demo test test-core test-keras-torch test-keras-jax test-keras-tensorflow bench bench-spark lint docs clean

venv: $(STAMP)

# What the demo needs, and nothing else.
$(DEMO_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -c constraints.txt -e ".[$(DEMO_EXTRAS)]"
	$(CHECK_TORCH)
	touch $(DEMO_STAMP)

# Everything the suite, the benchmarks, the docs and the linter need, on top of the demo's.
$(STAMP): $(DEMO_STAMP)
	$(PIP) install -q -c constraints.txt -e ".[dev]"
	$(CHECK_TORCH)
	touch $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python examples/ignite_recommender.py

# The whole suite: the core, Ignite, PyKEEN and distributed tests, and the Keras suite once per
# backend (KERAS_BACKEND is fixed when keras is imported), each on TEST_WORKERS processes, side
# by side: the core suite prints as it goes, each Keras suite runs beside it under `nice` (taking
# the CPU the core suite leaves idle) and prints its output whole when it ends
# (tests/run_suites.py; TEST_ONE_BY_ONE=1 runs them one after the other). Every suite goes ahead
# when one fails, and `make test` fails if any did, after printing each one's time.
KERAS_BACKENDS := torch jax tensorflow
TEST_ONE_BY_ONE ?=

test: venv
	MAKE="$(MAKE)" $(BIN)/python tests/run_suites.py $(if $(TEST_ONE_BY_ONE),--one-by-one) \
		core $(addprefix keras-,$(KERAS_BACKENDS))

test-core: venv
	@echo "== make test: core, Ignite, PyKEEN and distributed suites"
	XLA_FLAGS="$(TEST_XLA_FLAGS)" $(BIN)/python -m pytest -q $(XDIST) --durations=15 $(PYTEST_ARGS)

$(addprefix test-keras-,$(KERAS_BACKENDS)): test-keras-%: venv
	@echo "== make test: Keras suite on the $* backend"
	KERAS_BACKEND=$* RANKSTREAM_KERAS_SUITE=1 PYTHONHASHSEED=0 TF_CPP_MIN_LOG_LEVEL=3 XLA_FLAGS="$(TEST_XLA_FLAGS)" \
		$(BIN)/python -m pytest tests/keras/backend_suite -q $(XDIST) --durations=10 $(PYTEST_ARGS)

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
