"""Small helpers for benchmarks: timing, peak memory, machine description."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
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


def child_cpu_run(cmd: list[str], env: dict[str, str],
                  cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run ``cmd`` to its end (output captured); the process, its wall seconds and its CPU
    seconds (user + sys of it and its children, from ``RUSAGE_CHILDREN``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    py = platform.python_version()
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {py}"


def device_name(device: Any) -> str:
    """What ran the steps: the GPU's name and memory, or "cpu"."""
    import torch

    if torch.device(device).type != "cuda":
        return "cpu"
    props = torch.cuda.get_device_properties(device)
    return f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a results file (one JSON object per line); none if it is absent."""
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one record (a sweep resumes from what is already there) and echo it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(json.dumps(record), flush=True)
