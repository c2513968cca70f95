"""When a ``dpgnn`` command runs in the warm runner and when it runs by itself
(:mod:`flows.warm_env`, :mod:`flows.warm_client`): unit tests, no runner started (a fake
one answers on a socket where a test needs one)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest

from flows import warm, warm_client, warm_env, warm_state

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _warm_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's default is ``DPGNN_WARM=0`` (tests/conftest.py); these tests are about
    the runner."""
    monkeypatch.setenv("DPGNN_WARM", "1")


def test_the_dpgnn_script_is_the_warm_client() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["dpgnn"] == "flows.warm_client:main"


def test_code_version_is_tasks_code_version() -> None:
    from tasks.config import code_version

    assert warm_env.code_version() == code_version()


@pytest.mark.parametrize(("argv", "command", "home", "verbose"), [
    (["dpgnn", "run", "dp-mlp"], "run", "ENV", False),
    (["dpgnn", "--home", "h1", "-v", "audit", "x"], "audit", "h1", True),
    (["dpgnn", "--home=h2", "--verbose", "run"], "run", "h2", True),
    (["dpgnn", "--help"], None, None, False),
    (["dpgnn", "--home"], None, None, False),
    (["dpgnn"], None, None, False),
])
def test_parse_finds_the_command_and_home(tmp_path: Path, argv: list[str],
                                          command: str | None, home: str | None,
                                          verbose: bool) -> None:
    env = {"DPGNN_HOME": str(tmp_path / "ENV")}
    inv = warm_client.parse(argv, env)
    if command is None:
        assert inv is None
        return
    assert inv is not None and inv.command == command and inv.verbose == verbose
    assert inv.home == (tmp_path / "ENV" if home == "ENV" else Path(str(home)).resolve())


def test_parse_leaves_an_empty_home_to_the_command_line() -> None:
    assert warm_client.parse(["dpgnn", "run"], {"DPGNN_HOME": " "}) is None
    assert warm_client.parse(["dpgnn", "--home", "", "run"], {}) is None


def test_fingerprints_differ_only_where_the_runners_imports_read() -> None:
    base = {"PATH": "/bin", "LANG": "C.UTF-8"}
    runner = warm_env.fingerprint(base)
    # what only the command's own code reads may differ; thread variables default to 1
    same = {**base, "DPGNN_HOME": "/x", "PREFECT_API_URL": "http://h", "MLFLOW_X": "1",
            "PWD": "/elsewhere", "OLDPWD": "/", "_": "/bin/dpgnn", "SHLVL": "3",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert warm_env.difference(runner, warm_env.fingerprint(same)) is None
    why = warm_env.difference(runner, warm_env.fingerprint({**base, "OMP_NUM_THREADS": "2",
                                                            "TZ": "secret-ish"}))
    assert why is not None and "OMP_NUM_THREADS" in why and "TZ" in why
    assert "secret-ish" not in why  # names only, never values
    other = {**warm_env.fingerprint(base), "flags": [9]}
    assert "flags" in str(warm_env.difference(runner, other))


@pytest.mark.parametrize("value", ["0", "off", "false", "no"])
def test_dpgnn_warm_0_disables_it(value: str) -> None:
    assert not warm_env.enabled({"DPGNN_WARM": value})
    assert warm_env.enabled({}) and warm_env.enabled({"DPGNN_WARM": "1"})


def _argv(home: Path, *more: str) -> list[str]:
    return ["dpgnn", "--home", str(home), *more, "run", "dp-mlp"]


def test_no_socket_another_command_or_dpgnn_warm_0_runs_locally(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert warm_client.delegate(_argv(tmp_path)) is None
    fake = FakeRunner(tmp_path, [{"ready": True}, {"pid": 1}, {"exit": 3}])
    assert warm_client.delegate(["dpgnn", "--home", str(tmp_path), "datasets"]) is None
    assert warm_client.delegate([*_argv(tmp_path), "--workers", "2"]) is None
    assert warm_client.delegate([*_argv(tmp_path), "--dask-address=tcp://h:1"]) is None
    monkeypatch.setenv("DPGNN_WARM", "0")
    assert warm_client.delegate(_argv(tmp_path)) is None
    assert fake.request is None  # never connected


def test_a_stale_socket_runs_locally_silently_unless_verbose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = warm_env.socket_path(tmp_path)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: the runner is gone
    assert warm_client.delegate(_argv(tmp_path)) is None
    assert capsys.readouterr().err == ""
    assert warm_client.delegate(_argv(tmp_path, "-v")) is None
    assert "does not answer" in capsys.readouterr().err


class FakeRunner:
    """A socket that answers as a supervisor would: ``answers`` after the request."""

    def __init__(self, home: Path, answers: list[dict[str, Any]]) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(warm_env.socket_path(home)))
        self.sock.listen(1)
        self.answers, self.request, self.got = answers, None, b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        while not data.endswith(b"\n"):
            data += conn.recv(1 << 16)
        self.request = json.loads(data)
        for fd in fds:
            os.close(fd)
        for answer in self.answers:
            conn.sendall(json.dumps(answer).encode() + b"\n")
        conn.settimeout(2)
        try:
            while chunk := conn.recv(4096):
                self.got += chunk
        except OSError:
            pass
        conn.close()


def test_a_refusal_runs_locally_and_says_why_when_verbose(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    FakeRunner(tmp_path, [{"refused": "the warm runner's environment variables differ"}])
    assert warm_client.delegate(_argv(tmp_path, "-v")) is None
    assert "environment variables differ" in capsys.readouterr().err


def test_an_accepted_command_sends_what_a_fresh_process_needs(tmp_path: Path) -> None:
    fake = FakeRunner(tmp_path, [{"ready": True}, {"pid": 1}, {"exit": 3}])
    argv = _argv(tmp_path)
    assert warm_client.delegate(argv) == 3
    fake.thread.join(5)
    req = fake.request
    assert req is not None and req["argv"] == argv and req["cwd"] == os.getcwd()
    assert req["env"] == dict(os.environ) and req["path"] == sys.path
    assert req["fingerprint"] == warm_env.fingerprint()
    assert b'"go": true' in fake.got


def test_server_start_replaces_a_runner_of_older_code(tmp_path: Path) -> None:
    """``dpgnn server start`` keeps a runner of the current code and replaces an older one
    (a stand-in process: the check is the recorded pid, start time and command line)."""
    from flows import procs

    home = tmp_path.resolve()
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                            warm_state.MODULE, str(home)])
    try:
        info = {"pid": old.pid, "start_time": procs.start_time(old.pid),
                "stamp": warm_env.source_stamp()}
        warm_env.state_path(home).write_text(json.dumps(info))
        assert warm_state.start(home, {})["pid"] == old.pid  # current: kept
        warm_env.state_path(home).write_text(json.dumps({**info, "stamp": "older"}))
        new = warm_state.start(home, {"DPGNN_WARM": "1", "PATH": os.environ["PATH"]})
        assert old.wait(10) == -15 and new is not None and new["pid"] != old.pid
    finally:
        old.kill()
        old.wait()
        warm_state.stop(home)


def test_a_changed_code_version_is_refused_and_stops_the_runner(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        runner = warm.Runner.__new__(warm.Runner)
        runner.fingerprint, runner.stamp, runner.pid = warm_env.fingerprint(), "old", sleeper.pid
        sup = warm.Supervisor(runner, socket.socket(socket.AF_UNIX))
        why = sup._refusal({"fingerprint": warm_env.fingerprint()})
        assert why is not None and "changed since the warm runner started" in why
        assert sleeper.wait(10) == -15  # the stale runner was told to end (SIGTERM)
        runner.stamp = warm_env.source_stamp()
        assert sup._refusal({"fingerprint": warm_env.fingerprint()}) is None
    finally:
        sleeper.kill()
        sleeper.wait()


ADOPT = """
import json, os, random, sys, tempfile
from flows import warm_child
req = json.loads(sys.argv[1])
saved = warm_child.Saved(env_added={"ADDED_AT_IMPORT": "runner", "SET_BY_CLIENT": "runner"})
tempfile.gettempdir()  # cached from the runner's environment, as an import may have done
before = random.getstate()
warm_child._process(req, saved)
warm_child._randomness(saved)
um = os.umask(0)
print(json.dumps({"env": dict(os.environ), "cwd": os.getcwd(), "umask": um,
                  "argv": sys.argv, "path": sys.path, "tmp": tempfile.gettempdir(),
                  "reseeded": random.getstate() != before}))
"""


def test_a_forked_command_takes_the_clients_process_state(tmp_path: Path) -> None:
    """What :func:`flows.warm_child.adopt` sets from the request (in a child process: it
    changes the whole process): the client's environment exactly, plus what the runner's
    imports added where the client sets nothing (torch's ``TORCHINDUCTOR_CACHE_DIR``);
    its cwd, umask, argv and path; tempfile's folder recomputed from the client's TMPDIR;
    Python's generator reseeded."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
           "TMPDIR": str(tmpdir), "SET_BY_CLIENT": "client"}
    req = {"env": env, "cwd": str(tmp_path), "umask": 0o027, "argv": ["dpgnn", "run", "x"],
           "orig_argv": ["python", "dpgnn", "run", "x"], "path": [*sys.path, "/extra"]}
    out = subprocess.run([sys.executable, "-c", ADOPT, json.dumps(req)], capture_output=True,
                         text=True, check=True, env={**os.environ, "TMPDIR": "/tmp"})
    got = json.loads(out.stdout)
    assert got["env"] == {**env, "ADDED_AT_IMPORT": "runner"}
    assert got["cwd"] == str(tmp_path) and got["umask"] == 0o027
    assert got["argv"] == req["argv"] and got["path"] == req["path"]
    assert got["tmp"] == str(tmpdir) and got["reseeded"]


def test_stop_signals_only_our_runner(tmp_path: Path) -> None:
    """A recorded pid that is another process now (same pid, another command line, or
    another start time) is never signalled; the state and a stale socket are removed."""
    from flows import procs

    home = tmp_path.resolve()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for info in ({"pid": other.pid, "start_time": procs.start_time(other.pid)},
                     {"pid": other.pid, "start_time": "proc:1"}):
            warm_env.state_path(home).write_text(json.dumps(info))
            warm_env.socket_path(home).write_text("")
            assert not warm_state.stop(home)
            assert other.poll() is None
            assert not warm_env.state_path(home).exists()
            assert not warm_env.socket_path(home).exists()
    finally:
        other.kill()
        other.wait()
