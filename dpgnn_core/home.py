"""The project directory every default path of dpgnn lives under (datasets, artifacts, Prefect's
home and cache, the MLflow store, the server state): ``$DPGNN_HOME``, else ``./.dpgnn``.

The one place that default is written; ``tasks.config`` and ``flows`` call
:func:`project_dir`. Imports nothing but the standard library and has no side effects.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that names the project directory.
HOME_ENV = "DPGNN_HOME"
#: The project directory when ``$DPGNN_HOME`` is unset (relative to the working directory).
DEFAULT_HOME = ".dpgnn"


def project_dir() -> Path:
    """The project directory, resolved: ``$DPGNN_HOME`` or ``./.dpgnn``."""
    return Path(os.environ.get(HOME_ENV, DEFAULT_HOME)).resolve()


__all__ = ["DEFAULT_HOME", "HOME_ENV", "project_dir"]
