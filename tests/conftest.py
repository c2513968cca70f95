"""Shared fixtures. Real datasets come from ../shared/datasets (skipped when absent)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# One project directory per test process (each pytest-xdist worker and the controller), set
# before `tasks` (and so Prefect) is imported; removed when the session ends.
_HOME = Path(tempfile.mkdtemp(prefix="dpgnn-test-home-"))
_OWNER = os.getpid()
os.environ["DPGNN_HOME"] = str(_HOME)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.pop("PREFECT_API_URL", None)
# One compute thread per test process (set before torch is imported; child processes inherit
# it): `make test` runs two xdist workers on two cores, and torch's default of one OpenMP
# thread per core in each, next to Prefect servers and Dask workers, oversubscribed the
# cores: a 10 s Cora baseline test took 200 s in the suite.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# DGL (the optional extra) otherwise writes ~/.dgl/config.json when a test imports it first.
os.environ.setdefault("DGLBACKEND", "pytorch")

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "datasets"


@pytest.fixture(scope="session")
def shared() -> Path:
    """The real datasets folder; skips the test when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"real datasets not found at {SHARED} (clone with ../shared beside it)")
    return SHARED


@pytest.fixture(autouse=True)
def _cli_environment() -> Iterator[None]:
    """The CLI's global options write the environment (``--home`` sets DPGNN_HOME,
    ``--verbose`` DPGNN_VERBOSE) of the process that runs it: restore both after every
    test, so an in-process CLI call cannot leak into the next test or the subprocesses it
    starts."""
    saved = {k: os.environ.get(k) for k in ("DPGNN_HOME", "DPGNN_VERBOSE")}
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def home() -> Path:
    return _HOME


def _uses_home(environ: dict[str, str], home: Path) -> bool:
    return any(environ.get(k, "").startswith(str(home))
               for k in ("DPGNN_HOME", "PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH"))


def _stop_processes_under(home: Path) -> None:
    """Stop what this process started that still works in ``home``: a ``dpgnn server``
    recorded there, Prefect's ephemeral server (its database is under ``home``), and any
    other process descending from this one whose environment points into ``home``."""
    if (home / "server.json").is_file():
        from flows import server

        with contextlib.suppress(Exception):
            server.stop(home)
    ephemeral = sys.modules.get("prefect.server.api.server")
    if ephemeral is not None:
        for instance in list(ephemeral.SubprocessASGIServer._instances.values()):
            with contextlib.suppress(Exception):
                instance.stop()
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with torch-geometric
        return
    with contextlib.suppress(psutil.Error):
        left = []
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if _uses_home(child.environ(), home):
                    child.terminate()
                    left.append(child)
        _, alive = psutil.wait_procs(left, timeout=10)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()


def _remove_home() -> None:
    if os.getpid() != _OWNER:  # a forked child exiting: the home is its parent's
        return
    _stop_processes_under(_HOME)
    shutil.rmtree(_HOME, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _remove_home()


# Registered before Prefect is imported, so it runs after Prefect's own exit handlers (which
# stop its ephemeral server): removes what anything wrote into the home after the session.
atexit.register(_remove_home)
