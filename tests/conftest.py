import os
import sys

# The tests import `reference` (naive implementations) from this folder.
sys.path.insert(0, os.path.dirname(__file__))

# The core suite imports Keras in-process for its ops (tests/test_backends.py, test_stats.py, ...):
# on TensorFlow, Keras' own default, whatever ~/.keras/keras.json says, so that no test depends on
# which test imported Keras first. The Keras suite sets its backend itself (make test-keras-*).
if os.environ.get("RANKSTREAM_KERAS_SUITE") != "1":
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest
from hypothesis import HealthCheck, settings

from rankstream.core.backends import host_batches

# A shared or slow machine must not fail a property test: no per-example deadline and no
# "too slow" health check (the examples' count is what bounds a test). Decorators that set
# their own settings inherit these for what they leave unset.
settings.register_profile(
    "rankstream", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("rankstream")


def pytest_sessionfinish(session, exitstatus):
    """No silent skip: a run that skipped or xfailed a test fails (the summary line says which),
    unless ``RANKSTREAM_ALLOW_SKIPS=1`` (for a developer running a subset on a machine without
    every peer installed; ``make test`` installs all of them)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or os.environ.get("RANKSTREAM_ALLOW_SKIPS") == "1":
        return
    skipped = len(reporter.stats.get("skipped", [])) + len(reporter.stats.get("xfailed", []))
    if skipped and session.exitstatus == pytest.ExitCode.OK:
        reporter.write_line(
            f"rankstream: {skipped} test(s) skipped or xfailed; every test must run here "
            "(RANKSTREAM_ALLOW_SKIPS=1 allows it for a partial local run)",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(params=["host", "torch"])
def list_path(request):
    """Both paths of a CPU torch list batch: small batches on numpy views of the tensors (the
    default, ``"host"``) and on torch itself (``"torch"``, the path of large and GPU batches).
    A module runs every test on both with ``pytestmark = pytest.mark.usefixtures("list_path")``."""
    with host_batches(request.param == "host"):
        yield request.param
