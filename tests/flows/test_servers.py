"""Integration: a real `prefect server` and a real `mlflow server` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["DPGNN_HOME"] = str(home)
    return env


#: A ``dpgnn server`` for a test: no UI (whose files it would copy at start) and none of
#: the periodic services (scheduler, late runs, ...) that nothing here needs: each wakes up
#: every few seconds, seconds of CPU over a test. Runs are recorded as with them.
QUIET_SERVER = {"PREFECT_UI_ENABLED": "false"} | {
    f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false"
    for name in ("SCHEDULER", "LATE_RUNS", "FOREMAN", "PAUSE_EXPIRATIONS", "REPOSSESSOR",
                 "CANCELLATION_CLEANUP", "CLEANUP_RECONCILER", "TRIGGERS")}


def _ingest(ds: Path, env: dict[str, str]) -> None:
    """``dpgnn ingest`` of a 300-node synthetic graph, in this process (a subprocess would
    cost seconds of imports; ingest from the script is tested in test_ingest_faults.py).
    ``env`` (the commands' environment) is not needed: ingest writes only to ``ds``."""
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    r = CliRunner().invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                                 "-o", "num_nodes=300"])
    assert r.exit_code == 0, r.output


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _cli(home: Path, args: list[str]) -> Any:
    """A ``dpgnn server`` command that starts nothing (``status``, ``stop``) in this process,
    on the project ``home``: a subprocess costs ~3 s of CPU in imports (the script itself:
    test_cli.py's usage-error test)."""
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    return CliRunner().invoke(app, ["--home", str(home), "server", *args])


def _post(url: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as JSON; the answer's JSON. Retried on 503, as Prefect's own client
    does: a server answers 503 while its SQLite database is locked by another writer (its
    services, just after its start), the request's transaction rolled back."""
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    for attempt in range(6):
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == 5:
                raise
            time.sleep(0.5 * 2 ** attempt)


def _mlflow_server(tmp_path: Path, env: dict[str, str],
                   seeded_mlflow: Callable[[Path], bool]
                   ) -> tuple[subprocess.Popen[bytes], str]:
    """``mlflow server`` on a free port in its own session, its SQLite store a copy of the
    session's migrated one (nothing to migrate at start), without its job runner (MLflow's
    GenAI jobs: six more Python processes that nothing here uses); not waited for."""
    seeded_mlflow(tmp_path / "mlflow-server")
    port = _free_port()
    server = subprocess.Popen(
        [BIN / "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow-server' / 'mlflow.db'}",
         "--artifacts-destination", (tmp_path / "mlflow-artifacts").as_uri(), "--workers", "1"],
        env={**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    return server, f"http://127.0.0.1:{port}"


def _wait_healthy(server: subprocess.Popen[bytes], url: str) -> None:
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            assert server.poll() is None, "mlflow server exited"
            time.sleep(0.2)
    pytest.fail("mlflow server did not become healthy")


def _found_server_here(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What a ``dpgnn`` process does with the server it finds, for a command run here.

    A command looks for the background server in its home
    (:func:`flows.cli.common.use_server_if_running`) and names it in ``PREFECT_API_URL``
    before it imports Prefect, which reads its settings then. Prefect is imported here
    already: the server found is put into Prefect's settings too, until the command ends
    (its click context closes). Nothing is put there when the command finds none; it would
    then start a temporary server: the list returned gets the address of each one started
    (Prefect's own log of it goes to this process's stderr, not the command's)."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from typer._click.globals import get_current_context  # typer's own click's

    import flows.cli.common

    real = flows.cli.common.use_server_if_running
    started: list[str] = []

    def use_server_if_running() -> str | None:
        url = real()
        if url:
            get_current_context().with_resource(
                temporary_settings(updates={PREFECT_API_URL: url}))
        return url

    def start(self: SubprocessASGIServer, *args: Any, **kwargs: Any) -> Any:
        started.append(self.address)
        return real_start(self, *args, **kwargs)

    real_start = SubprocessASGIServer.start
    monkeypatch.setattr(flows.cli.common, "use_server_if_running", use_server_if_running)
    monkeypatch.setattr(SubprocessASGIServer, "start", start)
    return started


def _drain_prefect() -> None:
    """Send what Prefect's log and event workers still hold, as a ``dpgnn`` process does
    when it exits (before the server stops)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)
    EventsWorker.drain_all(timeout=30)  # (started again on their next use)


def test_prefect_and_mlflow_servers_receive_a_run(tmp_path: Path, fresh_home: Path,
                                                  seeded_mlflow: Callable[[Path], bool],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpgnn server start``, then one ``dpgnn run --tracking-uri`` of a real ``mlflow
    server`` (one run serves both servers' checks): Prefect records the run in the
    background server (no temporary one), MLflow receives its metrics and artifacts;
    ``dpgnn server stop`` then ends the server's whole process group.

    The servers are real processes; the run is in this process (``dpgnn_here``, through
    the entry point, without ``PREFECT_API_URL``), where it finds the background server in
    its home as a ``dpgnn`` process would (:func:`_found_server_here`)."""
    from tests.flows.clirunner import dpgnn_here

    # fresh_home is tmp_path / "home", its Prefect database already migrated (a copy of the
    # session's): the server and the run have nothing to migrate
    env = _clean_env(fresh_home)
    port = _free_port()
    _ingest(tmp_path / "ds", env)
    mlflow, url = _mlflow_server(tmp_path, env, seeded_mlflow)  # starts while Prefect's does
    temporary = _found_server_here(monkeypatch)
    try:
        start = subprocess.run([BIN / "dpgnn", "server", "start", "--port", str(port)],
                               env={**env, **QUIET_SERVER, "DPGNN_WARM": "1"},
                               capture_output=True, text=True, timeout=180)
        assert start.returncode == 0, start.stderr[-2000:]
        info = json.loads((fresh_home / "server.json").read_text())
        runner = json.loads((fresh_home / "warm.json").read_text())  # with its warm runner
        try:
            st = _cli(fresh_home, ["status", "--json"])
            assert st.exit_code == 0, st.output
            assert json.loads(st.stdout)["running"] is True
            _wait_healthy(mlflow, url)
            r = dpgnn_here(["run", "--method", "mlp", "--dataset", str(tmp_path / "ds"),
                            "--epochs", "3", "--tracking-uri", url, "--experiment", "it",
                            "--json"], home=fresh_home, main=True, fd=True)
            _drain_prefect()
            assert r.returncode == 0, r.stderr[-2000:]
            # The run was recorded by the background server, not an ephemeral one.
            runs = _post(f"http://127.0.0.1:{port}/api/flow_runs/filter", {"limit": 10})
            assert any(run["state_type"] == "COMPLETED" for run in runs), runs
            assert "Starting temporary server" not in r.stderr and not temporary
        finally:  # the server is not this process's child (`server start` has ended)
            stop = _cli(fresh_home, ["stop"])
        # The MLflow server received the run: its metrics, status and artifacts.
        assert len(r.stdout.strip().splitlines()) == 1, r.stdout
        out = json.loads(r.stdout)
        run = _get(f"{url}/api/2.0/mlflow/runs/get?run_id={out['mlflow_run_id']}")["run"]
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert metrics["test_accuracy"] == pytest.approx(out["test_accuracy"])
        assert run["info"]["status"] == "FINISHED"
        arts = _get(f"{url}/api/2.0/mlflow/artifacts/list?run_id={out['mlflow_run_id']}")
        assert "manifest.json" in {f["path"] for f in arts["files"]}
    finally:
        os.killpg(mlflow.pid, signal.SIGTERM)
        mlflow.wait(timeout=30)
    assert stop.exit_code == 0, stop.output
    assert "stopped" in stop.stdout
    assert not (fresh_home / "server.json").exists()
    from flows import procs

    assert not procs.group_running(info["pgid"])  # ended; a zombie may wait to be reaped
    assert procs.start_time(runner["pid"]) is None  # the warm runner too
    if not _gone_within(lambda: os.killpg(info["pgid"], 0), 30, every=0.2):
        pytest.fail(f"process group {info['pgid']} still exists 30 s after stop")


#: A browser for the UI test: Debian's ``chromium`` (``apt-get install chromium``) or another
#: Chromium build under its usual names.
CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(c)), None)


def _browse(url: str, profile: Path, until: Callable[[str], bool], screenshot: Path,
            timeout: float = 90.0) -> str:
    """The text of the page at ``url`` in headless Chromium, read (DevTools protocol,
    ``Runtime.evaluate``) every half second until ``until(text)`` holds or ``timeout``
    seconds pass; a screenshot of it then goes to ``screenshot``. A single-page app draws
    its pages by script after its API calls: ``--dump-dom --virtual-time-budget`` dumped
    some before the run list had arrived, on a loaded machine, one load in two."""
    import base64
    import re

    from websockets.sync.client import connect

    assert CHROMIUM is not None
    log = profile.with_name(f"{profile.name}.log")  # a file: a full pipe would stall it
    with log.open("wb") as out:
        proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                                 f"--user-data-dir={profile}", "--window-size=1400,900",
                                 "--remote-debugging-port=0", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=out, start_new_session=True)
    try:
        deadline = time.time() + 60
        while not (found := re.search(r"DevTools listening on ws://[\d.]+:(\d+)/",
                                      log.read_text(errors="replace"))):
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        targets = _get(f"http://127.0.0.1:{found.group(1)}/json/list")
        page = next(t for t in targets if t["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            calls = iter(range(1, 1 << 30))

            def call(method: str, **params: Any) -> dict[str, Any]:
                n = next(calls)
                ws.send(json.dumps({"id": n, "method": method, "params": params}))
                while (msg := json.loads(ws.recv(timeout=60))).get("id") != n:
                    pass  # an event: none is enabled, but skip any
                return dict(msg.get("result", {}))

            call("Page.navigate", url=url)
            deadline, text = time.time() + timeout, ""
            while not until(text) and time.time() < deadline:
                time.sleep(0.5)
                text = call("Runtime.evaluate", returnByValue=True,
                            expression="document.body ? document.body.innerText : ''"
                            )["result"].get("value", "")
            shot = call("Page.captureScreenshot", format="png")["data"]
            screenshot.write_bytes(base64.b64decode(shot))
        return text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # our Chromium's session only
        proc.wait(timeout=30)


def test_the_ui_talks_to_the_server_that_serves_it(tmp_path: Path, fresh_home: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpgnn server start --port P`` with its UI: ``/ui-settings`` names the API on port
    P (it named 127.0.0.1:4200, and the UI said "Can't connect to Server API"), and in
    headless Chromium the flow runs page shows a run recorded on the server."""
    for k in [k for k in os.environ if k.startswith("PREFECT_")]:
        monkeypatch.delenv(k)  # a user's environment; PREFECT_UI_ENABLED unset: the UI is on
    monkeypatch.setenv("PREFECT_API_BLOCKS_REGISTER_ON_START", "false")  # the copy has them
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    start = _cli(fresh_home, ["start", "--port", str(port)])
    assert start.exit_code == 0, start.output
    try:
        assert _get(f"{base}/ui-settings")["api_url"] == f"{base}/api"
        flow = _post(f"{base}/api/flows/", {"name": "ui-check"})
        name = f"ui-run-{os.getpid()}-{port}"
        _post(f"{base}/api/flow_runs/", {"flow_id": flow["id"], "name": name,
                                         "state": {"type": "COMPLETED", "name": "Completed"}})
        if CHROMIUM is None:
            pytest.skip("no Chromium to open the UI in (apt-get install chromium); "
                        "/ui-settings was checked")
        page = _browse(f"{base}/runs", tmp_path / "chromium",
                       # a run's row draws its name, then its flow's name after another
                       # request: wait for both (under load the first read with the
                       # run's name came before the flow's)
                       lambda text: (name in text and "ui-check" in text)
                       or "Can't connect" in text,
                       screenshot=tmp_path / "ui-runs.png")
    finally:
        stop = _cli(fresh_home, ["stop"])
    assert stop.exit_code == 0, stop.output
    # the page's text (its screenshot: tmp_path / "ui-runs.png")
    assert "Can't connect" not in page, page[-3000:]
    assert name in page and "ui-check" in page, page[-3000:]


def _gone_within(signal_0: Callable[[], None], seconds: float, every: float) -> bool:
    """Whether sending signal 0 (``signal_0``) finds no process within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            signal_0()
        except ProcessLookupError:
            return True
        time.sleep(every)
    return False


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    """A process in its own session, as a recorded server would be."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *args],
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _write_state(home: Path, info: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.json").write_text(json.dumps(info))


def _stop_reaped(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


@pytest.mark.parametrize("with_identity", [True, False])
def test_stop_leaves_a_reused_pid_alone(tmp_path: Path, with_identity: bool) -> None:
    """The recorded server died and its pid now belongs to an unrelated process: `server
    stop` must not signal it (old state files without the identity fields included)."""
    home = tmp_path / "home"
    other = _spawn()
    try:
        info = {"pid": other.pid, "pgid": other.pid, "url": "http://127.0.0.1:9/api",
                "port": 9}
        if with_identity:
            info |= {"start_time": "proc:1", "cmdline": ["prefect", "server", "start"]}
        _write_state(home, info)
        st = _cli(home, ["status", "--json"])
        assert st.exit_code == 0, st.output
        assert json.loads(st.stdout)["running"] is False
        r = _cli(home, ["stop"])
        assert r.exit_code == 0, r.output
        time.sleep(0.3)
        assert other.poll() is None, "stop signalled a process that is not our server"
        assert (f"the recorded server (pid {other.pid}) is no longer running; pid {other.pid} "
                "now belongs to another process, left alone") in r.stdout + r.stderr
        assert "stopped" not in r.stdout.split()
        assert not (home / "server.json").exists()
    finally:
        _stop_reaped(other)


def test_owner_checks_start_time_command_line_and_port(tmp_path: Path) -> None:
    from flows import procs, server

    port = _free_port()
    script = tmp_path / "prefect"  # a stand-in for the venv's `prefect` script
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    fake = subprocess.Popen([str(script), "server", "start", "--port", str(port)],
                            start_new_session=True)
    try:
        time.sleep(0.2)
        ident = {"pid": fake.pid, "pgid": fake.pid, "port": port,
                 "url": f"http://127.0.0.1:{port}/api",
                 "start_time": procs.start_time(fake.pid)}
        assert server.owner(ident)[0] == "ours"
        assert server.owner({**ident, "start_time": "proc:1"})[0] == "other"
        assert server.owner({**ident, "port": port + 1})[0] == "other"
        assert server.owner({**ident, "pgid": 1})[0] == "other"
        _write_state(tmp_path / "home", ident)
        assert server.stop_server(tmp_path / "home", timeout=10).stopped
        fake.wait(timeout=10)  # stop_server may have reaped it already (its parent here)
        assert server.owner(ident)[0] == "gone"
    finally:
        _stop_reaped(fake)


def test_workers_api_url_with_one_set_imports_no_server(tmp_path: Path) -> None:
    """With ``PREFECT_API_URL`` set, a sweep's workers get that URL and the command imports
    none of Prefect's server modules (over a second of imports in every such sweep; a fresh
    process: the test process holds them)."""
    code = ("import sys; from flows import server\n"
            "print(server.api_url_for_workers())\n"
            "print([m for m in ('prefect.server.api', 'fastapi', 'docket') if m in sys.modules])")
    env = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api",
           "DPGNN_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env).stdout.splitlines()
    assert out == ["http://127.0.0.1:9/api", "[]"], out


#: A command's start of its temporary server (what ``use_server_if_running`` does in a
#: ``dpgnn`` process without ``PREFECT_API_URL``), then a Prefect client call through it.
_TEMPORARY = """
import json, os, sys
import tasks
from flows import server
url = server.start_temporary(wait=False)  # as a command: it starts while Prefect imports
proc = server.ephemeral_process()
from prefect.client.orchestration import get_client
server.wait_temporary()
with get_client(sync_client=True) as client:
    client.api_healthcheck()
    answered = str(client.api_url)
print(json.dumps({"url": url, "client": answered, "pid": proc.pid,
                  "own_session": os.getsid(proc.pid) == proc.pid != os.getsid(0),
                  "server_modules": [m for m in ("prefect.server.api", "fastapi", "docket")
                                     if m in sys.modules]}))
"""


def test_a_command_starts_its_temporary_server_without_prefects_server_modules(
        fresh_home: Path) -> None:
    """The server a command starts when no API is configured: Prefect's client uses it, it
    runs in its own session (a Ctrl-C on the terminal leaves it to the command), it ends
    with the command, and the command imported none of Prefect's server modules (about 4 s
    of CPU a command)."""
    env = _clean_env(fresh_home)
    r = subprocess.run([sys.executable, "-c", _TEMPORARY], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["client"].rstrip("/") == out["url"] and out["url"].startswith("http://127.")
    assert out["own_session"] is True
    assert out["server_modules"] == []
    if not _gone_within(lambda: os.kill(out["pid"], 0), 10, every=0.1):
        pytest.fail(f"the temporary server (pid {out['pid']}) outlived its command")


#: A command's temporary server that cannot open its database: it ends during its start.
_TEMPORARY_FAILS = """
from flows import clilog, server
from pathlib import Path
try:
    with clilog.captured(Path("{home}")):
        server.start_temporary()
except Exception as e:
    print(f"error: {{e}}")
"""


def test_temporary_servers_output_goes_to_the_log_file(fresh_home: Path) -> None:
    """The temporary server's output (only errors: a database on a full disk is hundreds
    of lines of tracebacks) goes to the command's log file, not the terminal (``--verbose``
    leaves it on the terminal); a server that ends during its start is one line naming its
    cause. (The start-up timeout is raised: on a loaded machine the server took over the
    default 20 s to import and fail, and the command then reported the timeout instead.)"""
    env = _clean_env(fresh_home) | {
        "PREFECT_API_DATABASE_CONNECTION_URL": "sqlite+aiosqlite:////proc/nowhere/p.db",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "150"}
    r = subprocess.run([sys.executable, "-c", _TEMPORARY_FAILS.format(home=fresh_home)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.stdout.startswith("error: Prefect's temporary server"), r.stdout + r.stderr
    assert "ended during its start" in r.stdout
    assert "OperationalError" in r.stdout and "unable to open database file" in r.stdout
    assert r.stderr == ""
    (log,) = (fresh_home / "logs").glob("*.log")
    assert "Traceback" in log.read_text()


def test_temporary_server_refused_once_prefect_is_imported() -> None:
    """Prefect reads its settings once: a URL set after its import would not be used."""
    import prefect  # noqa: F401

    from dpgnn_core.errors import ServerError
    from flows import server

    with pytest.raises(ServerError, match="before Prefect is imported"):
        server.start_temporary()
