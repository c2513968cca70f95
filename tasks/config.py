"""Project directory, Prefect environment, the code version used in cache keys, and the
run context a flow hands its tasks so that a Dask worker started elsewhere uses the flow's
home and refuses another code version (:func:`run_context`, :func:`in_context`)."""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

from dpgnn_core.errors import DpgnnError

# The project directory's default is written once, in dpgnn_core.home; re-exported here.
from dpgnn_core.home import DEFAULT_HOME, project_dir, using_home

__all__ = ["DEFAULT_HOME", "HOME_ID", "RunContext", "WorkerMismatchError", "code_version",
           "configure_environment", "home_id", "in_context", "project_dir", "run_context"]

#: The file naming a project home's random id (written on first use).
HOME_ID = "home-id"


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
        # MLflow reads DO_NOT_TRACK only as "true"; its telemetry thread is off with this.
        "MLFLOW_DISABLE_TELEMETRY": "true",
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
    # A new home's Prefect database copied from the migrated template (tasks.prefect_db).
    # Whether a server may skip its migration is decided where flows.server starts one, in
    # that server's environment: set here, it would reach every child, whatever its home.
    from tasks import prefect_db

    prefect_db.seed(Path(os.environ["PREFECT_HOME"]))
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


class RunContext(TypedDict):
    """What a flow's tasks must share with the flow wherever they run: its project home
    (with the home's id, to tell a shared folder from a same-named local one) and its code
    version."""

    home: str
    home_id: str
    code_version: str


class WorkerMismatchError(DpgnnError, RuntimeError):
    """A task landed on a worker that runs another code version than the flow, or cannot
    see the flow's project home."""


def _read_id(home: Path) -> str | None:
    try:
        return (home / HOME_ID).read_text().strip() or None
    except OSError:
        return None


def home_id(home: Path | None = None) -> str:
    """The random id of a project home, created on first use (``<home>/home-id``; created
    with a hard link, so concurrent first uses agree on one id)."""
    home = home or project_dir()
    found = _read_id(home)
    if found:
        return found
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{HOME_ID}.{os.getpid()}.{secrets.token_hex(4)}"
    tmp.write_text(secrets.token_hex(16) + "\n")
    try:
        os.link(tmp, home / HOME_ID)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    out = _read_id(home)
    assert out is not None
    return out


def run_context() -> RunContext:
    """This process's project home (resolved) and code version, for the tasks it submits."""
    home = project_dir()
    return {"home": str(home), "home_id": home_id(home), "code_version": code_version()}


@contextmanager
def in_context(context: RunContext | None) -> Iterator[None]:
    """Run a task body in the flow's ``context``: refuse a worker whose code version
    differs from the flow's, or that does not see the flow's home (not the same folder: a
    worker on another host without a shared filesystem); then make the flow's home the
    project directory for the body (:func:`dpgnn_core.home.using_home`). No context: the
    worker's own environment, as for a local run.

    Raises:
        WorkerMismatchError: one line naming the worker, both values and the fix.
    """
    if context is None:
        yield
        return
    where = f"Dask worker {socket.gethostname()} (pid {os.getpid()})"
    mine, theirs = code_version(), context["code_version"]
    if mine != theirs:
        raise WorkerMismatchError(
            f"{where} runs dpgnn code version {mine[:12]}, the flow that submitted this "
            f"task runs {theirs[:12]}: install the same dpgnn code on every worker; the "
            "task was not run")
    home = Path(context["home"])
    if _read_id(home) != context["home_id"]:
        raise WorkerMismatchError(
            f"{where} does not see the flow's project home {home} ({HOME_ID} missing or "
            "another): give every worker that folder on a shared filesystem; the task was "
            "not run")
    with using_home(home):
        yield
