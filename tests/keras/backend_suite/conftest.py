"""Runs under one Keras backend, in a process started by ../test_keras_backends.py."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

BACKEND = os.environ.get("KERAS_BACKEND")
if BACKEND not in ("torch", "jax", "tensorflow"):
    raise pytest.UsageError(
        "tests/keras/backend_suite runs under one Keras backend: set KERAS_BACKEND to torch, jax or "
        "tensorflow (tests/keras/test_keras_backends.py does this for each backend)"
    )

import keras  # noqa: E402

if keras.backend.backend() != BACKEND:
    raise pytest.UsageError(f"KERAS_BACKEND={BACKEND} but keras runs on {keras.backend.backend()}")


def pytest_report_header(config):
    return f"keras {keras.__version__}, backend {keras.backend.backend()}"
