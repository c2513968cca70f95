"""Project directory, Prefect environment and the code version used in cache keys."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

# The project directory's default is written once, in dpgnn_core.home; re-exported here.
from dpgnn_core.home import DEFAULT_HOME, project_dir

__all__ = ["DEFAULT_HOME", "code_version", "configure_environment", "project_dir"]


def configure_environment(home: Path | None = None) -> Path:
    """Set Prefect's settings for this project unless the user set them already.

    Must run before ``prefect`` is imported. Returns the project directory.
    """
    home = home or project_dir()
    defaults = {
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_LOCAL_STORAGE_PATH": str(home / "cache"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        # A fresh SQLite database takes ~18 s to migrate on 2 cores; the default 20 s is tight.
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "300",
        "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING"),
        "PREFECT_RESULTS_PERSIST_BY_DEFAULT": "true",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    # Prefect creates its home without parents; a missing parent leaves its SQLite database
    # unopenable and the ephemeral server restarting until the start-up timeout.
    for key in ("PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH"):
        Path(os.environ[key]).expanduser().mkdir(parents=True, exist_ok=True)
    return home


@functools.cache
def code_version() -> str:
    """sha256 over the source of ``dpgnn_core`` and ``tasks`` (part of every cache key)."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent
    for pkg in ("dpgnn_core", "tasks"):
        for path in sorted((root / pkg).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()
