"""One guard against hangs for every subprocess and collective the tests start.

A slow or shared machine must never fail a test: no test limits how long work takes. What this
module bounds is a *hang* (a deadlocked collective, a child waiting on input that never comes),
with one generous limit, ``HANG_GUARD_S`` (30 minutes; ``RANKSTREAM_HANG_GUARD_S`` overrides it).
When it trips, the test fails with whatever the child printed until then.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

HANG_GUARD_S = float(os.environ.get("RANKSTREAM_HANG_GUARD_S", "1800"))


def _text(data: Any) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


def run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kwargs)`` under the hang guard; a
    child still running after ``HANG_GUARD_S`` is killed and the test fails showing its output."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    try:
        return subprocess.run(cmd, timeout=HANG_GUARD_S, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{cmd[:3]}... still running after the hang guard's {HANG_GUARD_S:.0f} s (a hang, not a "
            f"slow machine: RANKSTREAM_HANG_GUARD_S raises it); its output so far:\n"
            f"{_text(exc.stdout)}{_text(exc.stderr)}"
        ) from None
