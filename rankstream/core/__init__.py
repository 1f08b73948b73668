"""Framework-agnostic core: no torch, keras or ignite import at module import time."""

from rankstream.core.lists import MAPKernel, NDCGKernel
from rankstream.core.state import NotComputableError, State, merge

__all__ = ["MAPKernel", "NDCGKernel", "NotComputableError", "State", "merge"]
