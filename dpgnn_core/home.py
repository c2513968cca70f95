"""The project directory every default path of dpgnn lives under (datasets, artifacts, Prefect's
home and cache, the MLflow store, the server state): ``$DPGNN_HOME``, else ``./.dpgnn``.

The one place that default is written; ``tasks.config`` and ``flows`` call
:func:`project_dir`. A task run for a sweep on an external Dask cluster sets the sweep's home
for its own duration with :func:`using_home` (a context variable: it overrides the
worker's environment for that task only, and concurrent tasks of other sweeps on the same
worker keep theirs). Imports nothing but the standard library and has no side effects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

#: The environment variable that names the project directory.
HOME_ENV = "DPGNN_HOME"
#: The project directory when ``$DPGNN_HOME`` is unset (relative to the working directory).
DEFAULT_HOME = ".dpgnn"

_OVERRIDE: ContextVar[Path | None] = ContextVar("dpgnn_home", default=None)


def project_dir() -> Path:
    """The project directory, resolved: the one set by :func:`using_home` in this context,
    else ``$DPGNN_HOME`` or ``./.dpgnn``."""
    home = _OVERRIDE.get()
    if home is not None:
        return home
    return Path(os.environ.get(HOME_ENV, DEFAULT_HOME)).resolve()


@contextmanager
def using_home(home: str | Path) -> Iterator[Path]:
    """Make :func:`project_dir` return ``home`` inside the ``with`` block (this thread and
    context only)."""
    path = Path(home).resolve()
    token = _OVERRIDE.set(path)
    try:
        yield path
    finally:
        _OVERRIDE.reset(token)


__all__ = ["DEFAULT_HOME", "HOME_ENV", "project_dir", "using_home"]
