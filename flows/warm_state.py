"""Starting, stopping and finding the project home's warm runner (:mod:`flows.warm`), for
``dpgnn server start``/``stop`` (:mod:`flows.server`). Its state is
``$DPGNN_HOME/warm.json`` (pid, start time, command line), checked as the server's is
before it is signalled. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from flows import warm_env

#: The runner's module (``python -m flows.warm HOME``).
MODULE = "flows.warm"


def _owned(info: dict[str, Any], home: Path) -> bool:
    """Whether the process ``info`` records is still our runner of ``home``."""
    from flows import procs

    pid = int(info.get("pid", 0))
    try:
        if procs.start_time(pid) != info.get("start_time"):
            return False
        args = procs.cmdline(pid) or []
    except procs.Unverifiable:  # pragma: no cover - non-Linux without psutil
        return False
    return MODULE in args and str(home) in args


def _read_state(home: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(warm_env.state_path(home).read_text()))
    except (OSError, ValueError):
        return None


def status(home: Path) -> dict[str, Any]:
    """``{"running": bool, "pid", "socket", "ready"}`` of ``home``'s runner."""
    home = home.resolve()
    info = _read_state(home)
    if info is None or not _owned(info, home):
        return {"running": False}
    sock = warm_env.socket_path(home)
    return {**info, "running": True, "socket": str(sock), "ready": sock.exists()}


def start(home: Path, environ: dict[str, str]) -> dict[str, Any] | None:
    """Start ``home``'s runner in the background unless one of the current code runs or
    ``DPGNN_WARM=0``; returns its status (it accepts commands once its imports are done,
    a few seconds later: until then commands run by themselves). A runner of older code
    (:func:`flows.warm_env.source_stamp`) is stopped and replaced."""
    if not warm_env.enabled(environ):
        return None
    home = home.resolve()
    st = status(home)
    stamp = warm_env.source_stamp()
    if st["running"] and st.get("stamp") == stamp:
        return st
    if st["running"]:
        stop(home)
    from flows import procs, reaper

    env = {k: v for k, v in environ.items() if k != reaper.OWNER_ENV}
    with open(home / "warm.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", MODULE, str(home)], cwd=home, env=env,
                                stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    info = {"pid": proc.pid, "start_time": procs.start_time(proc.pid),
            "cmdline": procs.cmdline(proc.pid), "started": time.time(), "stamp": stamp}
    warm_env.state_path(home).write_text(json.dumps(info))
    return {**info, "running": True, "ready": False}


def stop(home: Path, timeout: float = 10.0) -> bool:
    """Stop ``home``'s runner if the recorded pid is still it; commands it runs go on.
    Returns whether it was running."""
    home = home.resolve()
    info = _read_state(home)
    warm_env.state_path(home).unlink(missing_ok=True)
    if info is None or not _owned(info, home):
        warm_env.socket_path(home).unlink(missing_ok=True)  # a stale one
        return False
    pid = int(info["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _owned(info, home):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _owned(info, home):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    warm_env.socket_path(home).unlink(missing_ok=True)
    return True
