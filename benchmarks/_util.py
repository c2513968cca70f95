"""Small helpers for benchmarks: timing, peak memory, machine description."""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable
from typing import Any


def peak_rss_gib() -> float:
    """Peak resident set size of this process so far (GiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def timed(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """Best wall time over ``repeat`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    py = platform.python_version()
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {py}"
