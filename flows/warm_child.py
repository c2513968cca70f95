"""The warm runner's two halves that touch the interpreter: what it imports once
(:func:`preimport`), and how a process forked from it becomes the command a client asked
for (:func:`adopt`), as if that command had started fresh.

Only third-party modules are imported, and none that reads a variable the forked command
may set differently (:mod:`flows.warm_env`); dpgnn's own packages, Prefect and MLflow are
imported by the command itself. After the imports the runner must still have one thread
(:func:`threads`): a fork copies only the forking thread, so a lock another thread held
would stay locked in the child forever. Standard library only at import.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

#: What the runner imports: the third-party modules a cached ``dpgnn run`` imports
#: (torch, the numerical stack, the storage and web stack under Prefect and MLflow, the
#: command line's framework), except Prefect and MLflow themselves, which read their
#: settings from the environment at import, and pyarrow (with pandas, which imports it),
#: whose jemalloc allocator starts a thread at import (0.3 s of CPU left to the command).
MODULES = (
    "numpy", "scipy", "scipy.special", "scipy.sparse", "scipy.stats", "scipy.signal",
    "scipy.optimize", "torch", "torch.nn", "torch.optim", "torch.nn.functional",
    "dp_accounting", "dp_accounting.rdp", "dp_accounting.pld", "sqlalchemy", "sqlalchemy.orm",
    "sqlalchemy.dialects.sqlite", "sqlalchemy.pool", "alembic", "alembic.runtime.migration",
    "pydantic", "pydantic_settings", "typer", "click", "rich", "rich.console", "rich.progress",
    "rich.table", "yaml", "httpx", "anyio", "h2", "jsonschema", "pendulum", "dateutil",
    "orjson", "cachetools", "fsspec", "packaging", "griffe", "coolname", "humanize", "slugify",
    "websockets", "starlette", "fastapi", "opentelemetry", "opentelemetry.trace",
    "prometheus_client", "google.protobuf", "requests", "urllib3", "sqlparse", "psutil",
    "tqdm", "cloudpickle", "toml", "jinja2", "asgi_lifespan", "jsonpatch", "exceptiongroup",
)
#: Signals whose handling the runner changes (restored in the command).
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)


@dataclass
class Saved:
    """What a fresh interpreter starts with that the runner changes or draws from."""

    handlers: dict[int, Any] = field(default_factory=dict)
    torch_rng: Any = None
    #: What the imports added to the environment (torch sets ``TORCHINDUCTOR_CACHE_DIR``)
    #: and to ``sys.path``: a fresh process's imports would add the same.
    env_added: dict[str, str] = field(default_factory=dict)
    path_added: list[str] = field(default_factory=list)


def preimport() -> tuple[Saved, list[str]]:
    """Import :data:`MODULES` (those installed), then build one torch optimiser (its first
    ``add_param_group`` imports ``torch._dynamo``, 1.5 s of CPU). Returns what
    :func:`adopt` restores and the modules that could not be imported."""
    saved = Saved(handlers={int(s): signal.getsignal(s) for s in HANDLED})
    env, path = dict(os.environ), list(sys.path)
    missing = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # an optional module: the command imports it
            missing.append(name)
        if name == "torch":
            import torch

            saved.torch_rng = torch.get_rng_state()  # a fresh process's: nothing drawn yet
    if "torch" in sys.modules:
        import torch

        param = torch.nn.Parameter(torch.zeros(1))
        torch.optim.SGD([param], lr=0.1)
    saved.env_added = {k: v for k, v in os.environ.items() if env.get(k) != v}
    saved.path_added = [p for p in sys.path if p not in path]
    return saved, missing


def threads() -> int:
    """This process's threads, as the kernel counts them (Python's and native ones)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - non-Linux
        import threading

        return threading.active_count()


@dataclass
class Job:
    """A command to run in a forked process: the client's request and its three
    standard descriptors."""

    request: dict[str, Any]
    fds: list[int]
    saved: Saved


def _streams(request: dict[str, Any]) -> None:
    """Standard streams as the client's: its descriptors on 0, 1, 2 (the runner's
    ``sys.std*`` objects, which imported modules may hold, write there), buffered as its
    were (line by line on a terminal)."""
    for target, fd in enumerate(request["_fds"]):
        if fd != target:
            os.dup2(fd, target)
    for fd in set(request["_fds"]):
        if fd > 2:
            os.close(fd)
    for stream, line in zip((sys.stdout, sys.stderr), request["line_buffering"], strict=True):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=line)


def _process(request: dict[str, Any], saved: Saved) -> None:
    """Environment, working directory, umask, arguments and import path of the client,
    with what the runner's imports added to them (as the same imports would have added in
    the client's own process: its environment equals the runner's before the imports)."""
    import locale
    import tempfile
    import time

    os.environ.clear()
    os.environ.update(request["env"])
    for key, value in saved.env_added.items():
        os.environ.setdefault(key, value)
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    sys.argv = list(request["argv"])
    sys.orig_argv = list(request["orig_argv"])
    sys.path[:] = list(request["path"]) + [p for p in saved.path_added
                                           if p not in request["path"]]
    importlib.invalidate_caches()
    time.tzset()
    with contextlib.suppress(locale.Error):
        locale.setlocale(locale.LC_CTYPE, "")
    tempfile.tempdir = None  # recomputed from TMPDIR on first use, as in a fresh process


def _randomness(saved: Saved) -> None:
    """The non-secret generators as a fresh process has them: Python's and numpy's
    global ones from OS entropy (Python's is reseeded at fork anyway), torch's default
    generator at its fixed start state. The secret ones (noise, sampling) are created by
    the command from the OS CSPRNG when it needs them (:mod:`dpgnn_core.privacy.randomness`);
    nothing secret exists in the runner."""
    import random

    random.seed()
    if "numpy" in sys.modules:
        import numpy as np

        np.random.seed()
    if saved.torch_rng is not None:
        import torch

        torch.set_rng_state(saved.torch_rng)


def adopt(job: Job) -> None:
    """Make this forked process the client's command (module docstring)."""
    os.setpgid(0, 0)  # a group of its own: a forwarded Ctrl-C reaches its group, as a
    # terminal's does
    for signum, handler in job.saved.handlers.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    _streams({**job.request, "_fds": job.fds})
    _process(job.request, job.saved)
    _randomness(job.saved)


def run(job: Job) -> None:
    """Adopt ``job`` and run the command line in this process; its ``SystemExit`` ends
    the interpreter as a fresh ``dpgnn`` process would end."""
    adopt(job)
    from flows.cli import main

    main()
