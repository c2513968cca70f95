"""What the warm runner (:mod:`flows.warm`) and a command that wants to use it
(:mod:`flows.warm_client`) must agree on before a command is run in a process forked from
the runner instead of a fresh one. Standard library only: the client imports it before
anything else.

The rule (docs/user-guide.md, "A warm runner"). The runner imports only third-party modules
(torch, scipy, pandas, pyarrow, SQLAlchemy, ...; never Prefect, MLflow or dpgnn's own
``dpgnn_core``, ``tasks``, ``flows``, which the forked command imports itself, from the
files as they are then, in its own environment). What those modules read from the
environment at import (``OMP_NUM_THREADS`` for the OpenMP pool, ``TORCH_LOGS``,
``OPENBLAS_*``, ``TQDM_*``, ``FORCE_COLOR`` for Typer, ``TZ``, the locale, ``PYTHON*``,
...) is fixed in the runner; so a command is run there only when its environment, after
:func:`one_thread_unless_set`, equals the one the runner imported them with, **every
variable** compared except those that only the command's own code reads (:func:`child_only`:
``DPGNN_*``, ``PREFECT_*``, ``MLFLOW_*``, ``DO_NOT_TRACK``, and the shell's ``PWD``,
``OLDPWD``, ``SHLVL``, ``_``), and when the interpreter, its ``sys.path`` and flags, the
user and groups, the resource limits and the standard streams' encodings are the same.
Anything else runs locally, as if there were no runner.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: Compute threads of a ``dpgnn`` process and its children unless the environment sets
#: them: one (see :func:`one_thread_unless_set`).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Commands that may run in the warm runner.
DELEGATED = ("run", "audit")
#: Set to ``0`` to never use the warm runner (and not start one with ``dpgnn server start``).
WARM_ENV = "DPGNN_WARM"
#: Variables only the command's own code reads (never a module the runner imports).
CHILD_ONLY_PREFIXES = ("DPGNN_", "PREFECT_", "MLFLOW_")
CHILD_ONLY_NAMES = frozenset({"DO_NOT_TRACK", "PWD", "OLDPWD", "SHLVL", "_"})
#: The runner's socket and state, in the project home.
SOCKET_NAME = "warm.sock"
STATE_NAME = "warm.json"
_ROOT = Path(__file__).resolve().parent.parent
_LIMITS = ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
           "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_STACK")


def one_thread_unless_set(environ: Any = None) -> None:
    """Set :data:`THREAD_VARIABLES` to 1 in ``environ`` (``os.environ``) where it sets none
    of them (before torch is imported: a small model's steps are too short to share between
    cores, and torch's default of one OpenMP thread per core spins on a busy machine)."""
    env = os.environ if environ is None else environ
    if not any(v in env for v in THREAD_VARIABLES):
        for v in THREAD_VARIABLES:
            env[v] = "1"


def child_only(name: str) -> bool:
    """Whether variable ``name`` is read only by code the forked command imports itself."""
    return name in CHILD_ONLY_NAMES or name.startswith(CHILD_ONLY_PREFIXES)


def _limits() -> dict[str, list[int]]:
    import resource

    return {n: list(resource.getrlimit(getattr(resource, n))) for n in _LIMITS
            if hasattr(resource, n)}


def _stream(s: Any) -> list[Any]:
    return [getattr(s, "encoding", None), getattr(s, "errors", None)]


def fingerprint(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """What must be equal between the runner and a command for the command to run in it
    (module docstring); ``environ``: the command's (this process's by default)."""
    env = dict(os.environ if environ is None else environ)
    one_thread_unless_set(env)
    return {
        "executable": sys.executable,
        "path": sys.path[1:],  # [0] is the script's folder: the runner's is its module's
        "flags": list(sys.flags), "warnoptions": list(sys.warnoptions),
        "xoptions": {k: str(v) for k, v in sys._xoptions.items()},
        "ids": [os.getuid(), os.getgid(), sorted(os.getgroups())],
        "limits": _limits(),
        "streams": [_stream(sys.stdin), _stream(sys.stdout), _stream(sys.stderr)],
        "env": {k: v for k, v in env.items() if not child_only(k)},
    }


def difference(runner: dict[str, Any], command: dict[str, Any]) -> str | None:
    """Why a command of fingerprint ``command`` cannot run in a runner of fingerprint
    ``runner`` (names only, never a variable's value), else None."""
    for key in sorted(set(runner) | set(command)):
        if key == "env":
            continue
        if runner.get(key) != command.get(key):
            return f"its {key} differ from this command's"
    a, b = runner.get("env", {}), command.get("env", {})
    names = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if names:
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f"environment variables differ from this command's: {shown}"
    return None


def code_version() -> str:
    """``tasks.config.code_version()``, the hash of ``dpgnn_core``'s and ``tasks``'s source
    (a test keeps the two equal), computed without importing ``tasks`` (whose import
    configures Prefect's environment)."""
    import hashlib

    h = hashlib.sha256()
    for pkg in ("dpgnn_core", "tasks"):
        for path in sorted((_ROOT / pkg).rglob("*.py")):
            h.update(str(path.relative_to(_ROOT)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def source_stamp() -> str:
    """The code a runner must have started with for a command to run in it: the code
    version (:func:`code_version`), the warm runner's own modules, and the modification
    times of the interpreter's site-packages folders (an install or an upgrade of a module
    it imported changes them)."""
    import hashlib

    h = hashlib.sha256(code_version().encode())
    for name in ("warm.py", "warm_child.py", "warm_client.py", "warm_env.py",
                 "warm_state.py"):
        path = _ROOT / "flows" / name
        if path.is_file():
            h.update(name.encode() + path.read_bytes())
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")) and os.path.isdir(entry):
            h.update(f"{entry}:{os.stat(entry).st_mtime_ns}".encode())
    return h.hexdigest()


def socket_path(home: Path) -> Path:
    return home / SOCKET_NAME


def state_path(home: Path) -> Path:
    return home / STATE_NAME


def enabled(environ: Any = None) -> bool:
    """Whether the warm runner may be used (``DPGNN_WARM`` is not ``0``)."""
    env = os.environ if environ is None else environ
    return env.get(WARM_ENV, "1").strip() not in ("0", "false", "no", "off")
