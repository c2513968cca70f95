"""A local Prefect server kept running in the background, so repeated ``dpgnn run`` calls
skip the ephemeral server's start-up (about 10 s a process on 2 cores).

State lives in ``$DPGNN_HOME/server.json``; the server runs in its own process group
(``setsid``) and ``stop`` ends the whole group. The state records the server's pid, its start
time and command line and the port: ``status`` and ``stop`` check all of them before they
trust the pid, so a pid that now belongs to another process (the server died, the number was
reused) is never signalled. Imports nothing heavy.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dpgnn_core.errors import ServerError
from dpgnn_core.home import project_dir
from flows import procs, reaper, warm_state

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


def _until_healthy(proc: subprocess.Popen[Any], url: str, timeout: float, every: float
                   ) -> Literal["healthy", "exited", "timeout"]:
    """Poll a starting server until it answers at ``url``, its process ends, or
    ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        if healthy(url, timeout=min(2.0, every * 10)):
            return "healthy"
        time.sleep(every)
    return "timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


Owner = Literal["ours", "gone", "other"]


def _is_server_cmdline(args: list[str], port: int) -> bool:
    """Whether ``args`` is ``[python] .../prefect server start ... --port PORT``."""
    try:
        i = args.index("server")
    except ValueError:
        return False
    if not any(Path(a).name == "prefect" for a in args[:i]) or "start" not in args[i + 1:]:
        return False
    return ("--port" in args and args.index("--port") + 1 < len(args)
            and args[args.index("--port") + 1] == str(port)) or f"--port={port}" in args


def owner(info: dict[str, Any]) -> tuple[Owner, str]:
    """Who holds the pid recorded in ``info`` now: ``"ours"`` (the server we started: same
    start time, a ``prefect server start`` command line on the recorded port, the recorded
    process group), ``"gone"`` (no such process) or ``"other"`` (the pid was reused); with
    a sentence saying so."""
    pid = int(info["pid"])
    try:
        started = procs.start_time(pid)
        args = procs.cmdline(pid) if started is not None else None
    except procs.Unverifiable as e:  # pragma: no cover - non-Linux without psutil
        return "other", f"cannot verify that pid {pid} is the recorded server ({e}); left alone"
    if started is None or args is None:
        return "gone", f"the recorded server (pid {pid}) is no longer running"
    other = (f"the recorded server (pid {pid}) is no longer running; pid {pid} now belongs "
             "to another process, left alone")
    if info.get("start_time") is not None and started != info["start_time"]:
        return "other", other
    if not _is_server_cmdline(args, int(info.get("port", DEFAULT_PORT))):
        return "other", other
    try:
        if os.getpgid(pid) != int(info.get("pgid", pid)):
            return "other", other
    except ProcessLookupError:
        return "gone", f"the recorded server (pid {pid}) is no longer running"
    return "ours", f"server pid {pid}"


def status(home: Path | None = None) -> dict[str, Any]:
    """``{"running": bool, "url": ..., "pid": ...}`` of this project's server; a recorded
    pid that is gone or now another process's is reported with ``"stale"`` saying so."""
    path = state_file(home)
    if not path.is_file():
        return {"running": False}
    info = json.loads(path.read_text())
    who, why = owner(info)
    if who != "ours":
        return {**info, "running": False, "stale": why}
    return {**info, "running": healthy(info["url"])}


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


def _same_database(st: dict[str, Any], database: str | None) -> None:
    """Raise when the running server ``st`` uses another database than ``database`` (the
    masked URL asked for; None: the project's SQLite)."""
    if st.get("database") != database:
        raise ServerError(f"a server is already running at {st['url']} (pid {st['pid']}) on "
                          f"{st.get('database') or 'the project SQLite database'}; "
                          "`dpgnn server stop` it first")


def _served_at(url: str, port: int, env: dict[str, str]) -> dict[str, str]:
    """The server process's settings that name where it is served. ``prefect server start
    --port`` listens on that port, but its UI's ``/ui-settings`` took the API's address from
    ``PREFECT_SERVER_API_HOST``/``PORT`` (127.0.0.1:4200 unless set): the UI of a server on
    any other port said "Can't connect to Server API". A ``PREFECT_UI_API_URL`` the user set
    (a proxy in front of the server) is kept."""
    served = {"PREFECT_SERVER_API_HOST": "127.0.0.1", "PREFECT_SERVER_API_PORT": str(port)}
    if not (env.get("PREFECT_UI_API_URL") or env.get("PREFECT_SERVER_UI_API_URL")):
        served["PREFECT_UI_API_URL"] = url
    return served


def start(port: int = DEFAULT_PORT, home: Path | None = None, timeout: float = 120.0,
          database_url: str | None = None) -> dict[str, Any]:
    """Start ``prefect server start`` on 127.0.0.1:``port`` in a new session; wait until
    healthy. Idempotent: returns the running server's info if one is up (on the same
    database). ``database_url``: Prefect's database (``postgresql+asyncpg://...``,
    checked first by :func:`flows.server_db.check_database_url`); SQLite under the
    project by default."""
    from flows.server_db import check_database_url

    home = home or _home()
    st = status(home)
    # Prefect's own variable, when set, is what the server would use: checked and recorded.
    label = "--database-url" if database_url else "PREFECT_API_DATABASE_CONNECTION_URL"
    database_url = database_url or os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL")
    database = check_database_url(database_url, label=label) if database_url else None
    if st["running"]:
        _same_database(st, database)
        return {**st, "warm": warm_state.start(home, dict(os.environ))}
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
    if database_url:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    env.update(_served_at(url, port, env))
    from tasks import prefect_db

    env.update(prefect_db.prepare(home / "prefect", env))
    env.pop(reaper.OWNER_ENV, None)  # outlives the command that starts it, by design
    log = open(home / "server.log", "ab")
    argv = [_prefect_exe(), "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env=env, start_new_session=True)
    # Popen returns once the child has exec'd, so /proc shows the server's own command line.
    info = {"pid": proc.pid, "pgid": proc.pid, "url": url, "port": port,
            "start_time": procs.start_time(proc.pid),
            "cmdline": procs.cmdline(proc.pid) or argv,
            "log": str(home / "server.log"), "started": time.time(), "database": database}
    state_file(home).write_text(json.dumps(info))
    # The warm runner imports while the server starts (flows.warm); it takes no server.
    warm_info = warm_state.start(home, dict(os.environ))
    outcome = _until_healthy(proc, url, timeout, every=0.5)
    if outcome == "healthy":
        _saved_template(env)
        return {**info, "running": True, "warm": warm_info}
    warm_state.stop(home)
    if outcome == "exited":
        state_file(home).unlink(missing_ok=True)
        raise ServerError(f"prefect server exited with {proc.returncode}; see "
                           f"{home / 'server.log'}")
    stop(home)
    raise ServerError(f"prefect server not healthy after {timeout:.0f} s; see "
                       f"{home / 'server.log'}")


@dataclass(frozen=True)
class StopResult:
    """What :func:`stop_server` did: ``stopped`` (our server was running and was ended) and a
    sentence for the user."""

    stopped: bool
    message: str


def stop_server(home: Path | None = None, timeout: float = 20.0) -> StopResult:
    """Stop the server's process group, after checking that the recorded pid is still our
    server (:func:`owner`); a pid that is gone or reused is never signalled. The state file
    is removed in every case. The warm runner (:mod:`flows.warm`) is stopped first, if
    it is still ours; commands it runs go on."""
    warm_state.stop(home or _home())
    path = state_file(home)
    if not path.is_file():
        return StopResult(False, "no server was running")
    info = json.loads(path.read_text())
    who, why = owner(info)
    if who != "ours":
        path.unlink(missing_ok=True)
        return StopResult(False, why)
    pid, pgid = int(info["pid"]), int(info.get("pgid", info["pid"]))
    # The group is ours from here on: a pgid is not handed out again while its group exists.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.time() + timeout
    while time.time() < deadline and procs.group_running(pgid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if procs.group_running(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    path.unlink(missing_ok=True)
    return StopResult(True, "stopped")


def stop(home: Path | None = None, timeout: float = 20.0) -> bool:
    """:func:`stop_server`; returns whether our server was running. A recorded pid that now
    belongs to another process is reported on stderr."""
    result = stop_server(home, timeout)
    if not result.stopped and result.message != "no server was running":
        print(result.message, file=sys.stderr)
    return result.stopped


class _DetachedSubprocess:
    """``subprocess`` as Prefect's ephemeral-server module sees it after
    :func:`detach_ephemeral`: ``Popen`` starts its process in a new session."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(*args, **kwargs)


def detach_ephemeral() -> None:
    """Start Prefect's ephemeral server (``SubprocessASGIServer``, used when no
    ``PREFECT_API_URL`` is set) in its own session: a Ctrl-C on the terminal goes to the
    command's process group, and the server, in that group, ended at once, so the run
    could not record its end and failed after minutes of ``ConnectError`` retries. The
    server still ends with the command: Prefect stops it at exit, and the command's
    watchdog (:mod:`flows.reaper`) ends it if the command is killed. Call before the first
    flow starts; idempotent."""
    from prefect.server.api import server as api

    if not isinstance(getattr(api, "subprocess", None), _DetachedSubprocess):
        setattr(api, "subprocess", _DetachedSubprocess())  # noqa: B010 - not exported


@dataclass
class _Temporary:
    proc: subprocess.Popen[bytes]
    url: str
    output: _Output | None = None
    env: dict[str, str] | None = None  # the server's environment


class _Output:
    """The temporary server's output, read in a daemon thread and logged line by line as
    errors of :data:`flows.clilog.SERVER_LOGGER`, which only the command's log file hears
    (:func:`flows.clilog.captured`), never the terminal: the server logs only errors, and
    when the project home's disk fills (a database write fails) they are hundreds of lines
    of tracebacks around the command's one ``error:`` line. Its last lines are kept for
    the error of a server that ends during its start."""

    def __init__(self, stream: Any) -> None:
        import collections
        import logging
        import threading

        from flows.clilog import SERVER_LOGGER

        self.last: collections.deque[str] = collections.deque(maxlen=20)
        self._log = logging.getLogger(SERVER_LOGGER)
        self._log.propagate = False
        if not self._log.handlers:  # else, outside captured, logging's last resort prints
            self._log.addHandler(logging.NullHandler())
        self._stream = stream
        self._thread = threading.Thread(target=self._pump, name="dpgnn-server-output",
                                        daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            for raw in self._stream:
                line = raw.decode("utf-8", "replace").rstrip()
                self.last.append(line)
                self._log.error("%s", line)

    def cause(self) -> str:
        """Once the server has ended: the last exception its output names (``module.Error:
        message``), else its last line (``""`` if none)."""
        import re

        self._thread.join(2.0)
        lines = [ln.strip() for ln in self.last if ln.strip()]
        errors = [ln for ln in lines if re.match(r"[\w.]+(Error|Exception): ", ln)]
        return (errors or lines or [""])[-1]


#: This process's temporary server, when :func:`start_temporary` started one.
_temporary: _Temporary | None = None


def _saved_template(env: dict[str, str] | None) -> None:
    """After a server on ``env``'s Prefect home answers: its freshly migrated database
    becomes the template of new homes if there is none (:func:`tasks.prefect_db.after_start`;
    never raises)."""
    if env and env.get("PREFECT_HOME"):
        from tasks import prefect_db  # lazily: importing tasks configures the environment

        prefect_db.after_start(Path(env["PREFECT_HOME"]), env)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop_temporary() -> None:
    """End the temporary server (its whole session), as Prefect ends its own at exit."""
    global _temporary
    t, _temporary = _temporary, None
    if t is None or t.proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(t.proc.pid, signal.SIGTERM)
    try:
        t.proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(t.proc.pid, signal.SIGKILL)
        t.proc.wait()


def start_temporary(wait: bool = True) -> str:
    """Start the command's temporary Prefect server, as Prefect's own ephemeral server
    (``SubprocessASGIServer``: the same ``uvicorn`` command on 127.0.0.1, UI and
    scheduling services off) but without importing Prefect's server modules into this
    process: about 4 s of CPU per command on 2 cores that the command never uses (the API
    runs in the child). Started in its own session, so a Ctrl-C on the terminal does not
    end it mid-run; stopped at exit, and by the command's watchdog (:mod:`flows.reaper`)
    if the command is killed. Its output goes to the command's log file, not the terminal,
    unless verbose (:class:`_Output`). Sets ``PREFECT_API_URL`` for this process
    (Prefect must not be imported yet: it reads its settings once) and returns the URL.

    With ``wait`` (the default) it returns once the server answers; without, at once, and
    :func:`wait_temporary` must be called before Prefect's first call, so that the
    server's start-up overlaps the command's own imports (seconds of wall time a command
    where a core is free)."""
    global _temporary
    import atexit
    import importlib.util

    if "prefect" in sys.modules:
        raise ServerError("start_temporary must run before Prefect is imported")
    spec = importlib.util.find_spec("prefect")
    if spec is None or spec.origin is None:
        raise ServerError("Prefect is not installed")
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT__SERVER_FINAL": "1"}
    env.pop("PREFECT_API_URL", None)
    if env.get("PREFECT_HOME"):
        from tasks import prefect_db

        env.update(prefect_db.prepare(Path(env["PREFECT_HOME"]), env))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    from flows.clilog import verbose

    quiet = not verbose()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(spec.origin).parent.parent),
         "--factory", "prefect.server.api.server:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "error", "--lifespan", "on"],
        env=env, start_new_session=True, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None)
    if _temporary is None:
        atexit.register(_stop_temporary)
    _temporary = _Temporary(proc, url, None if proc.stdout is None else _Output(proc.stdout),
                            env)
    os.environ["PREFECT_API_URL"] = url
    if wait:
        wait_temporary()
    return url


def wait_temporary() -> None:
    """Return once the temporary server (:func:`start_temporary`) answers its health
    check; at once when this process started none. Waits up to
    ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (Prefect's setting, 20 s unless
    set; a new home's database migrates first), and stops it on failure."""
    t = _temporary
    if t is None:
        return
    timeout = float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "20"))
    if _until_healthy(t.proc, t.url, timeout, every=0.1) == "healthy":
        _saved_template(t.env)
        return
    code = t.proc.poll()
    _stop_temporary()
    if code is None:
        raise ServerError(f"Prefect's temporary server (pid {t.proc.pid}) did not answer "
                          f"within {timeout:g} s (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_"
                          "SECONDS)")
    cause = t.output.cause() if t.output is not None else ""
    raise ServerError(f"Prefect's temporary server (pid {t.proc.pid}) ended during its start "
                      f"(exit code {code})" + (f": {cause}" if cause else ""))


def api_url_for_workers() -> str:
    """The Prefect API that this process's other processes (a sweep's LocalCluster workers)
    should report to: the configured ``PREFECT_API_URL``, else this process's ephemeral
    server, started now if it is not yet running.

    Without an API URL, Prefect runs each process against a temporary server of its own:
    every worker of a sweep started one more server on the same database, ~8 s of CPU each
    and SQLite writers racing (a 2-point sweep on 2 workers ran 3 servers). The server
    started here is the one this process's own flows then use (Prefect keeps one per
    process), and it ends with the process as before. Prefect's server modules (over a
    second of imports) are imported only when it must be started."""
    from prefect.settings import get_current_settings

    url = get_current_settings().api.url
    if url:
        return str(url)
    from prefect.server.api.server import SubprocessASGIServer

    ephemeral = SubprocessASGIServer()
    ephemeral.start()
    return str(ephemeral.api_url)


def ephemeral_process() -> subprocess.Popen[Any] | None:
    """The process of this process's temporary server (:func:`start_temporary`, or
    Prefect's own ephemeral server), if one was started."""
    if _temporary is not None:
        return _temporary.proc
    if "prefect.server.api.server" not in sys.modules:
        return None
    from prefect.server.api import server as api

    for instance in list(api.SubprocessASGIServer._instances.values()):
        proc = getattr(instance, "server_process", None)
        if proc is not None:
            return proc  # type: ignore[no-any-return]
    return None


def _ended(background: dict[str, Any] | None, seen: list[subprocess.Popen[Any]]) -> str | None:
    """A sentence when the Prefect server this process uses has ended, else None."""
    if background is not None:
        who, _ = owner(background)
        if who != "ours":
            return (f"the Prefect server at {background['url']} (pid {background['pid']}, "
                    "`dpgnn server start`) is no longer running")
        return None
    if not seen:
        proc = ephemeral_process()
        if proc is None:
            return None
        seen.append(proc)
    code = seen[0].poll()
    if code is None:
        return None
    return (f"Prefect's temporary server (pid {seen[0].pid}) ended during the run (exit "
            f"code {code})")


@contextlib.contextmanager
def watched(on_end: Callable[[str], None], home: Path | None = None, every: float = 0.5
            ) -> Iterator[None]:
    """Within the block, a thread checks every ``every`` seconds that the Prefect server
    this process uses (the background server when ``PREFECT_API_URL`` names it, else the
    ephemeral one once started) still runs, and calls ``on_end(sentence)`` once if it has
    ended: Prefect's client would otherwise retry for minutes and end in a bare
    ``ConnectError``. ``on_end`` runs in that thread (it may end the process)."""

    background = None
    url = os.environ.get("PREFECT_API_URL")
    if url and not (_temporary is not None and url == _temporary.url):
        path = state_file(home)
        try:
            info = json.loads(path.read_text()) if path.is_file() else None
        except (OSError, ValueError):
            info = None
        if info is None or info.get("url") != url:
            yield  # a server of someone else's: its life is not ours to tell
            return
        background = info
    seen: list[subprocess.Popen[Any]] = []
    with procs.watching(lambda: _ended(background, seen), on_end, every,
                        "dpgnn-server-watch"):
        yield

