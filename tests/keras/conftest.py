"""The Keras suite runs under one backend per process (``KERAS_BACKEND`` is read when keras is
first imported): ``make test`` runs ``pytest tests/keras/backend_suite`` once per backend, each
its own pytest invocation with ``RANKSTREAM_KERAS_SUITE=1`` (``make test-keras-jax`` runs one).
Without that variable the suite is not collected, so a plain ``pytest tests`` never runs it
in-process under whatever backend keras would pick."""

import os

if os.environ.get("RANKSTREAM_KERAS_SUITE") != "1":
    collect_ignore = ["backend_suite"]
