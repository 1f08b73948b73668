import os
import sys

# The tests import `reference` (naive implementations) from this folder.
sys.path.insert(0, os.path.dirname(__file__))

import pytest

from rankstream.core.backends import host_batches


@pytest.fixture(params=["host", "torch"])
def list_path(request):
    """Both paths of a CPU torch list batch: small batches on numpy views of the tensors (the
    default, ``"host"``) and on torch itself (``"torch"``, the path of large and GPU batches).
    A module runs every test on both with ``pytestmark = pytest.mark.usefixtures("list_path")``."""
    with host_batches(request.param == "host"):
        yield request.param
