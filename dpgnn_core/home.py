"""The project directory every default path of dpgnn lives under (datasets, artifacts, Prefect's
home and cache, the MLflow store, the server state): ``$DPGNN_HOME``, else ``./.dpgnn``.

The one place that default is written; ``tasks.config`` and ``flows`` call
:func:`project_dir`. A task run for a sweep on an external Dask cluster sets the sweep's home
for its own duration with :func:`using_home` (a context variable: it overrides the
worker's environment for that task only, and concurrent tasks of other sweeps on the same
worker keep theirs). An empty ``$DPGNN_HOME`` (``DPGNN_HOME=``) is an error
(:class:`HomeError`), never the working directory. Imports nothing but the standard library
(and :mod:`dpgnn_core.errors`, which imports nothing else) and has no side effects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from dpgnn_core.errors import DpgnnError

#: The environment variable that names the project directory.
HOME_ENV = "DPGNN_HOME"
#: The project directory when ``$DPGNN_HOME`` is unset (relative to the working directory).
DEFAULT_HOME = ".dpgnn"

_OVERRIDE: ContextVar[Path | None] = ContextVar("dpgnn_home", default=None)


class HomeError(DpgnnError, ValueError):
    """``$DPGNN_HOME`` (or ``--home``) is set but empty: it names no folder. Taken as the
    working directory, it would fill it (a repository, say) with the budget store, the
    MLflow store and the artifacts."""


def check_home_text(text: str, where: str = f"${HOME_ENV}") -> str:
    """``text`` if it can name a project directory; :class:`HomeError` (one line) if it is
    empty or blank."""
    if not text.strip():
        raise HomeError(f"{where} is set but empty ({text!r}): set it to a project folder "
                        f"(e.g. {DEFAULT_HOME}) or unset it")
    return text


def project_dir() -> Path:
    """The project directory, resolved: the one set by :func:`using_home` in this context,
    else ``$DPGNN_HOME`` or ``./.dpgnn``.

    Raises:
        HomeError: ``$DPGNN_HOME`` is set but empty or blank.
    """
    home = _OVERRIDE.get()
    if home is not None:
        return home
    text = os.environ.get(HOME_ENV)
    if text is None:
        return Path(DEFAULT_HOME).resolve()
    return Path(check_home_text(text)).resolve()


@contextmanager
def using_home(home: str | Path) -> Iterator[Path]:
    """Make :func:`project_dir` return ``home`` inside the ``with`` block (this thread and
    context only)."""
    path = Path(check_home_text(str(home), "the project home")).resolve()
    token = _OVERRIDE.set(path)
    try:
        yield path
    finally:
        _OVERRIDE.reset(token)


__all__ = ["DEFAULT_HOME", "HOME_ENV", "HomeError", "check_home_text", "project_dir",
           "using_home"]
