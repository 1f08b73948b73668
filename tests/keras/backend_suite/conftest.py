"""Runs under the one Keras backend KERAS_BACKEND names (``make test-keras-torch``, ``-jax``, ...)."""

import gc
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

BACKEND = os.environ.get("KERAS_BACKEND")
if BACKEND not in ("torch", "jax", "tensorflow"):
    raise pytest.UsageError(
        "tests/keras/backend_suite runs under one Keras backend: set KERAS_BACKEND to torch, jax or "
        "tensorflow (make test runs it once per backend; make test-keras-jax runs one)"
    )

import keras  # noqa: E402

if keras.backend.backend() != BACKEND:
    raise pytest.UsageError(f"KERAS_BACKEND={BACKEND} but keras runs on {keras.backend.backend()}")


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend {keras.backend.backend()}"


#: on JAX, the resident memory (bytes) past which a finished test file's compiled functions are let go
RELEASE_ABOVE = int(os.environ.get("RANKSTREAM_JAX_RELEASE_ABOVE", str(2 << 30)))


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_functions():
    """On JAX, after a test file, let go of what the models compiled once the process holds more
    than ``RELEASE_ABOVE`` (2 GiB): JAX keeps every traced and compiled function of the process
    (its workers grew to about 5 GB over the suite), so that two suites side by side on one
    machine stay well within its memory; below it the next files reuse what is compiled (each
    primitive's eager kernels, above all)."""
    yield
    if BACKEND == "jax" and (not os.path.exists("/proc/self/statm") or _resident_bytes() > RELEASE_ABOVE):
        import jax

        keras.backend.clear_session()
        jax.clear_caches()
        gc.collect()
