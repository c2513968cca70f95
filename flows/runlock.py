"""One run of a spec on a dataset at a time in a project home.

Two identical ``dpgnn run`` commands started together would both miss the cache, both
train, both spend the privacy budget and both write the one artifact folder of that spec
(the second model replacing the first, whose printed and MLflow result then names a model
that no longer exists). :func:`same_run_lock` makes the second wait for the first: it
blocks on an exclusive ``flock`` of ``$DPGNN_HOME/locks/run-<key>.lock``, keyed by the
dataset's content hash and the whole spec, and then finds the first run's steps in the
cache (one release, one folder, no second charge). The kernel releases the lock when its
holder ends, however it ends, so a killed run never blocks the next. Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from flows import procs


def lock_path(home: Path, dataset_sha256: str, spec: dict[str, Any]) -> Path:
    """The lock file of runs of ``spec`` on the dataset of ``dataset_sha256``."""
    from dpgnn_core.io import sha256_json

    key = sha256_json({"dataset": dataset_sha256, "spec": spec})[:32]
    return home / "locks" / f"run-{key}.lock"


@contextlib.contextmanager
def same_run_lock(path: Path, on_wait: Callable[[str], None] | None = None
                  ) -> Iterator[float]:
    """Hold the exclusive lock ``path`` for the block, waiting for its holder first (with
    ``on_wait(holder)`` called once, ``holder`` naming the process that holds it). Yields
    the seconds waited. The file stays (removing it would let a waiter lock a file no
    longer in place); it holds the current holder's pid."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    waited = 0.0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(_holder(fd))
            start = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            waited = time.monotonic() - start
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(procs.identity()).encode(), 0)
        yield waited
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    try:
        rec = json.loads(os.pread(fd, 500, 0) or b"{}")
        return f"pid {int(rec['pid'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


__all__ = ["lock_path", "same_run_lock"]
