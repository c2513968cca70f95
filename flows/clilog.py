"""Where the command line's diagnostics go.

A user sees one ``error: ...`` line per failure; the full story (Prefect's task and flow
logs with their tracebacks, or the traceback of an unexpected error) goes to a log file
under the project home, ``$DPGNN_HOME/logs/<time>-<pid>.log``, whose path the error line
names. ``--verbose`` (or ``DPGNN_VERBOSE=1``) shows everything on the terminal as well.
A Python warning (GAP's "encoder_dim exceeds the input features", a library's) is one
``warning: ...`` line, its source in the file; one that says nothing a user can act on
(Dask's dashboard port taken) only goes to the file.

Imports nothing heavy, and nothing that reads a setting: it is also the preload of a sweep's
Dask workers (:func:`dask_setup`). The handlers attach to the standard :mod:`logging` tree,
into which Prefect's own loggers propagate.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

#: Below this much free space at the project home a run is refused before it starts: the
#: Prefect database, the artifacts and MLflow's store all write there, and a full disk
#: otherwise shows up minutes later as a timeout of Prefect's server.
MIN_FREE_BYTES = 64 << 20


class HomeError(OSError):
    """The project home cannot hold a run's state (a file, read-only, full)."""


def verbose() -> bool:
    return os.environ.get("DPGNN_VERBOSE", "") not in ("", "0", "false")


def check_home(home: Path) -> None:
    """Refuse a project home that is a file, cannot be created or written, or sits on a
    (nearly) full disk, naming the path; create it otherwise.

    Raises:
        HomeError: with a one-line message.
    """
    if home.exists() and not home.is_dir():
        raise HomeError(f"project home {home} is a file, not a folder (set --home or "
                        "DPGNN_HOME to a folder)")
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".write-check-"):
            pass
    except OSError as e:
        raise HomeError(f"cannot write the project home {home}: "
                        f"{e.strerror or e}") from e
    free = shutil.disk_usage(home).free
    if free < MIN_FREE_BYTES:
        raise HomeError(f"the disk of the project home {home} is full ({free >> 20} MiB "
                        f"free, a run needs at least {MIN_FREE_BYTES >> 20} MiB)")


#: Below this much free space during a run, the disk of the project home counts as full
#: (:func:`disk_watched`).
FULL_BYTES = 1 << 20


@contextlib.contextmanager
def disk_watched(home: Path, on_full: Callable[[str], None], every: float = 0.5
                 ) -> Iterator[None]:
    """Within the block, a thread checks every ``every`` seconds that the disk of ``home``
    has at least :data:`FULL_BYTES` free, and calls ``on_full(sentence)`` once when it has
    not: a full disk otherwise shows up as minutes of the Prefect server's database errors
    and thousands of lines of tracebacks. ``on_full`` runs in that thread (it may end the
    process)."""
    from flows.procs import watching

    with watching(lambda: disk_full(home), on_full, every, "dpgnn-disk-watch"):
        yield


def disk_full(home: Path) -> str | None:
    """The sentence that says the disk of ``home`` is full (less than :data:`FULL_BYTES`
    free), or ``None``."""
    try:
        free = shutil.disk_usage(home).free
    except OSError:
        return None
    if free < FULL_BYTES:
        return f"the disk of the project home {home} is full ({free >> 10} KiB free)"
    return None


def log_path(home: Path) -> Path:
    """A new log file's path under ``home/logs`` (the temp folder if that is unusable)."""
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    folder = home / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        folder = Path(tempfile.gettempdir())
    return folder / name


class _HideFailures(logging.Filter):
    """Keep Prefect's records (a failed task or flow, with its 90-line traceback; a flow's
    warning such as "MLflow logging failed", which the command's summary prints as its
    own ``warning:`` line) and Dask's shutdown warnings (a worker "still alive after 4.0
    seconds, killing") and urllib3's (the HTTP retries of MLflow's client) off the
    terminal: the CLI prints one line instead, and the file has them. Any other warning
    record (dpgnn's own loggers: a late budget record, an abandoned flow run marked
    crashed) is shown as one plain ``warning: <its first line>``, not in Prefect's
    format (issue 48 §6)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(("prefect", "urllib3")) or (
                record.levelno < logging.ERROR and record.name.startswith("distributed")):
            return False  # urllib3: MLflow's HTTP retries ("Retrying (Retry(total=0...")
        if record.levelno == logging.WARNING:
            if getattr(record, "dpgnn_shown", False):  # one line, however many consoles
                return False
            record.dpgnn_shown = True
            text = record.getMessage().strip()
            first = text.splitlines()[0] if text else record.name
            print(f"warning: {first}", file=sys.stderr, flush=True)
            return False
        return True


#: The log file the Dask workers of a sweep's local cluster write their output to
#: (:func:`workers_log_to`, :func:`dask_setup`).
WORKER_LOG_ENV = "DPGNN_WORKER_LOG"


@contextlib.contextmanager
def workers_log_to(path: Path | None) -> Iterator[None]:
    """Within the block, the Dask workers that a sweep's local cluster starts (their nanny
    sets this process's environment and they run :func:`dask_setup` as a preload:
    :func:`flows.sweep.local_cluster`) append their standard output and error to ``path``
    instead of the terminal, unless verbose: a point's failure in a worker is otherwise a
    40-line Prefect traceback on the terminal, which no logging filter of this process can
    see. ``None``: nothing changes."""
    if path is None or verbose():
        yield
        return
    saved = os.environ.get(WORKER_LOG_ENV)
    os.environ[WORKER_LOG_ENV] = str(path)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(WORKER_LOG_ENV, None)
        else:
            os.environ[WORKER_LOG_ENV] = saved


#: Set by the nanny of each worker of a sweep's local cluster
#: (:func:`flows.sweep.local_cluster`): the names of the variables it sets (the sweep's whole
#: environment), as a JSON list.
SWEEP_ENV_NAMES = "DPGNN_SWEEP_ENVIRON"


def _start_environ_names() -> set[str]:
    """The names of the environment this process started with: a forked worker's is its
    forkserver's, the environment of the process that ran the first sweep's cluster
    (``/proc/self/environ``; this process's current names where that cannot be read)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return set(os.environ)
    return {os.fsdecode(e.split(b"=", 1)[0]) for e in raw.split(b"\0") if b"=" in e}


def adopt_sweep_environ() -> list[str]:
    """In a worker of a sweep's local cluster (its nanny set :data:`SWEEP_ENV_NAMES`), make
    the environment exactly the sweep's: the nanny has set each of its variables; unset the
    ones the worker inherited when it started that the sweep does not have (a forked
    worker inherits the environment of an earlier sweep: another ``DPGNN_HOME``,
    ``DPGNN_WORKER_LOG``, ``PREFECT_API_URL``). Variables that the forkserver's imports
    set themselves are kept, as a spawned worker's imports would set them. Returns the
    names unset; nothing elsewhere."""
    import json
    import tempfile

    names = os.environ.pop(SWEEP_ENV_NAMES, None)
    if names is None:
        return []
    gone = sorted(_start_environ_names() - set(json.loads(names)) - {SWEEP_ENV_NAMES})
    for name in gone:
        os.environ.pop(name, None)
    tempfile.tempdir = None  # found again from TMPDIR (an import may have looked it up)
    return gone


def dask_setup(worker: object = None) -> None:
    """Dask's preload hook, run in each worker process of a sweep's local cluster as it
    starts, before it runs a task: first take the sweep's environment
    (:func:`adopt_sweep_environ`), then send the worker's standard output and error to the
    file named by ``DPGNN_WORKER_LOG`` (:func:`workers_log_to`); nothing more when that
    variable is unset."""
    adopt_sweep_environ()
    path = os.environ.get(WORKER_LOG_ENV)
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError:  # the terminal, then
        return
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


#: Warnings a user can do nothing about: the log file has them, the terminal does not.
QUIET_WARNINGS = (
    "is already in use",  # Dask: "Port 8787 is already in use ... Hosting the HTTP server
                          # on port N instead" (the dashboard of a second cluster)
)


@contextlib.contextmanager
def warnings_to(handler: logging.Handler) -> Iterator[None]:
    """Within the block, a Python warning is written whole (category, source file and
    line) to ``handler`` and shown as one ``warning: <its first line>`` on standard error,
    or not at all if it is one of :data:`QUIET_WARNINGS`; with ``--verbose`` Python's own
    display is kept."""
    if verbose():
        yield
        return
    saved = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        text = str(message).strip()
        handler.handle(logging.makeLogRecord({
            "name": "py.warnings", "levelno": logging.WARNING, "levelname": "WARNING",
            "msg": f"{filename}:{lineno}: {category.__name__}: {text}"}))
        if not any(q in text for q in QUIET_WARNINGS):
            first = text.splitlines()[0] if text else category.__name__
            print(f"warning: {first}", file=sys.stderr, flush=True)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = saved


#: The logger of the command's temporary Prefect server's output
#: (:func:`flows.server.start_temporary`): it does not propagate; :func:`captured` writes it
#: to the log file.
SERVER_LOGGER = "prefect.server.temporary"


class _LogFile(logging.FileHandler):
    """The command's log file. A record it cannot write (the disk is full) is lost
    silently: :class:`logging.Handler`'s own ``handleError`` prints a 60-line traceback for
    each to standard error, hundreds of lines around the command's one ``error:`` line;
    and closing it does not raise."""

    def handleError(self, record: logging.LogRecord) -> None:
        """The record is lost; nothing is printed."""

    def close(self) -> None:  # its last flush fails the same way
        with contextlib.suppress(OSError):
            super().close()


@contextlib.contextmanager
def captured(home: Path) -> Iterator[Path]:
    """Send every log record (Prefect's included) to a new log file under ``home`` for the
    duration; unless verbose, hide Prefect's error records from the terminal and show
    Python warnings in one line (:func:`warnings_to`). Yields the log file's path (created
    on the first record)."""
    path = log_path(home)
    handler = _LogFile(path, delay=True, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter(
        "%(asctime)s | %(levelname)-7s | %(name)s - %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    server_log = logging.getLogger(SERVER_LOGGER)
    server_log.addHandler(handler)
    hide = _HideFailures()
    consoles: list[logging.Handler] = []
    if not verbose():
        consoles = [h for h in root.handlers if h is not handler]
        for h in consoles:
            h.addFilter(hide)
    try:
        with warnings_to(handler):
            yield path
    finally:
        for h in consoles:
            h.removeFilter(hide)
        root.removeHandler(handler)
        server_log.removeHandler(handler)
        handler.close()


def write_traceback(path: Path, exc: BaseException) -> Path:
    """Append ``exc``'s traceback to the log file ``path``; return the path written."""
    text = "".join(traceback.format_exception(exc))
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)
        return path
    except OSError:
        fallback = Path(tempfile.gettempdir()) / path.name
        with open(fallback, "a", encoding="utf-8") as f:
            f.write(text)
        return fallback
