"""A local Prefect server kept running in the background, so repeated ``dpgnn run`` calls
skip the ephemeral server's start-up (about 10 s a process on 2 cores).

State lives in ``$DPGNN_HOME/server.json``; the server runs in its own process group
(``setsid``) and ``stop`` ends the whole group. Imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from dpgnn_core.errors import ServerError
from dpgnn_core.home import project_dir

DEFAULT_PORT = 4242


def _home() -> Path:
    return project_dir()


def state_file(home: Path | None = None) -> Path:
    return (home or _home()) / "server.json"


def healthy(url: str, timeout: float = 2.0) -> bool:
    """Whether the Prefect API at ``url`` answers its health check."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def status(home: Path | None = None) -> dict[str, Any]:
    """``{"running": bool, "url": ..., "pid": ...}`` of this project's server."""
    path = state_file(home)
    if not path.is_file():
        return {"running": False}
    info = json.loads(path.read_text())
    running = _alive(info["pid"]) and healthy(info["url"])
    return {**info, "running": running}


def api_url_if_running(home: Path | None = None) -> str | None:
    st = status(home)
    return str(st["url"]) if st["running"] else None


def _prefect_exe() -> str:
    cand = Path(sys.executable).parent / "prefect"
    if cand.is_file():
        return str(cand)
    found = shutil.which("prefect")
    if not found:
        raise ServerError("the prefect command is not installed in this environment")
    return found


def start(port: int = DEFAULT_PORT, home: Path | None = None, timeout: float = 120.0
          ) -> dict[str, Any]:
    """Start ``prefect server start`` on 127.0.0.1:``port`` in a new session; wait until
    healthy. Idempotent: returns the running server's info if one is up."""
    home = home or _home()
    st = status(home)
    if st["running"]:
        return st
    home.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}/api"
    if healthy(url):
        raise ServerError(f"another server already answers on port {port}; pick --port")
    env = dict(os.environ)
    env.update({
        "PREFECT_HOME": str(home / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "PREFECT_UI_ENABLED": env.get("PREFECT_UI_ENABLED", "true"),
    })
    env.pop("PREFECT_API_URL", None)
    log = open(home / "server.log", "ab")
    proc = subprocess.Popen(
        [_prefect_exe(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        start_new_session=True,
    )
    info = {"pid": proc.pid, "pgid": proc.pid, "url": url, "port": port,
            "log": str(home / "server.log"), "started": time.time()}
    state_file(home).write_text(json.dumps(info))
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            state_file(home).unlink(missing_ok=True)
            raise ServerError(f"prefect server exited with {proc.returncode}; see "
                               f"{home / 'server.log'}")
        if healthy(url):
            return {**info, "running": True}
        time.sleep(0.5)
    stop(home)
    raise ServerError(f"prefect server not healthy after {timeout:.0f} s; see "
                       f"{home / 'server.log'}")


def stop(home: Path | None = None, timeout: float = 20.0) -> bool:
    """Stop the server's process group. Returns whether one was running."""
    path = state_file(home)
    if not path.is_file():
        return False
    info = json.loads(path.read_text())
    was = _alive(info["pid"])
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(info["pgid"], signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and _alive(info["pid"]):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info["pid"], os.WNOHANG)
        time.sleep(0.2)
    if _alive(info["pid"]):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(info["pgid"], signal.SIGKILL)
    path.unlink(missing_ok=True)
    return was
