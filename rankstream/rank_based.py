"""Deprecated name of :mod:`rankstream.pykeen` (PyKEEN's rank-based metrics over arrays of
ranks), kept for one release: importing it warns once and gives the same objects."""

import sys
import warnings

from rankstream import pykeen as _pykeen

warnings.warn(
    "rankstream.rank_based is now rankstream.pykeen; the old name will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
# the very module under both names: every class, function and registry is shared
sys.modules[__name__] = _pykeen
