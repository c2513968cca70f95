"""The suite leaves no project home behind: every ``dpgnn-test-home-*`` folder that
tests/conftest.py creates (one per process, pytest-xdist workers included) is removed at the
end of the session, after the servers started under it are stopped.

A child pytest runs the probes below with ``TMPDIR`` pointing at a fresh folder; the probes
are skipped in an ordinary run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: tests/conftest.py's variable naming the session's Prefect template folder.
PREFECT_TEMPLATE_ENV = "DPGNN_TEST_PREFECT_TEMPLATE"
PROBE = os.environ.get("DPGNN_CLEANUP_PROBE", "")
#: The outer tests never run inside the child (no recursion).
_outer = pytest.mark.skipif(bool(PROBE), reason="inside the child pytest")
_probe = pytest.mark.skipif(not PROBE, reason="a probe of test_no_test_home_is_left_behind, "
                                               "run by it in a child pytest")


def _out(name: str, value: object) -> None:
    (Path(os.environ["DPGNN_CLEANUP_PROBE_OUT"]) / name).write_text(json.dumps(value))


@_probe
def test_probe_writes_in_home(home: Path) -> None:
    assert home.name.startswith("dpgnn-test-home-")
    (home / "data").mkdir()
    (home / "data" / "x.txt").write_text("x")
    _out(f"home-{os.getpid()}", str(home))


#: A stand-in for the venv's ``prefect`` script: ``prefect server start ... --port N``
#: answers the health check on 127.0.0.1:N until it is stopped (a real Prefect server costs
#: 10-20 s of CPU; the clean-up under test treats both alike).
_STAND_IN = """#!{python}
import http.server, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@_probe
@pytest.mark.integration
@pytest.mark.skipif("servers" not in PROBE, reason="servers only when asked")
def test_probe_leaves_a_dpgnn_server_running(home: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """``dpgnn server start``'s code (its own session, its state file in the home, the
    health check), a stand-in for the ``prefect`` it starts."""
    from flows import server

    exe = tmp_path / "prefect"
    exe.write_text(_STAND_IN.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setattr(server, "_prefect_exe", lambda: str(exe))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    info = server.start(port=port, home=home)
    assert server.status(home)["running"] is True  # the state file names our server
    _out("dpgnn-server", info["pid"])


@_probe
@pytest.mark.integration
@pytest.mark.skipif("servers" not in PROBE, reason="servers only when asked")
def test_probe_leaves_the_ephemeral_server_running(home: Path) -> None:
    import tasks  # noqa: F401, I001 - first: Prefect's home under the test home
    from prefect import flow
    from prefect.server.api.server import SubprocessASGIServer

    @flow
    def one() -> int:
        return 1

    assert one() == 1
    assert os.environ["PREFECT_HOME"].startswith(str(home))
    pids = [i.server_process.pid for i in SubprocessASGIServer._instances.values()
            if i.server_process is not None]
    assert pids
    _out("ephemeral", pids)


@_probe
@pytest.mark.integration
@pytest.mark.skipif("servers" not in PROBE, reason="servers only when asked")
def test_probe_leaves_the_shared_prefect_server_running(prefect_api_url: str) -> None:
    from prefect.server.api.server import SubprocessASGIServer

    proc = SubprocessASGIServer().server_process
    assert proc is not None and prefect_api_url.startswith("http://127.0.0.1:")
    _out(f"shared-{os.getpid()}", proc.pid)


def _child_pytest(tmp_path: Path, probe: str, *args: str, own_template: bool = False
                  ) -> tuple[Path, Path]:
    """A child pytest of the probes; it migrates its own Prefect template when
    ``own_template``, else copies this session's."""
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "MLFLOW_", "PYTEST_", "DPGNN_"))}
    if not own_template:
        env[PREFECT_TEMPLATE_ENV] = os.environ[PREFECT_TEMPLATE_ENV]
    env |= {"TMPDIR": str(tmp), "DPGNN_CLEANUP_PROBE": probe,
            "DPGNN_CLEANUP_PROBE_OUT": str(out), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1", "PREFECT_UI_ENABLED": "false"}  # a `dpgnn server`: no UI
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *args, str(Path(__file__).relative_to(REPO))],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return tmp, out


def _gone(pid: int) -> bool:
    from flows import procs

    deadline = time.time() + 10
    while time.time() < deadline:
        if procs.start_time(pid) is None:
            return True
        time.sleep(0.2)
    return False


@_outer
def test_no_test_home_is_left_behind(tmp_path: Path) -> None:
    tmp, out = _child_pytest(tmp_path, "1", "-p", "no:xdist", own_template=True)
    homes = [json.loads(p.read_text()) for p in out.glob("home-*")]
    assert len(homes) == 1 and homes[0].startswith(str(tmp))
    assert not list(tmp.glob("dpgnn-test-home-*"))
    assert not list(tmp.glob("dpgnn-test-prefect-*"))  # the Prefect template, its own


@_outer
@pytest.mark.slow
@pytest.mark.integration
def test_no_test_home_or_server_is_left_behind_with_xdist(tmp_path: Path) -> None:
    """Two xdist workers (each with its home), a `dpgnn server` and Prefect's ephemeral
    server started under a test home: all stopped, every home removed. The probes go to one
    worker (``--dist loadfile``), so the ephemeral server the flow starts and the
    ``prefect_api_url`` fixture's are one (the fixture's is Prefect's ephemeral server):
    one Prefect start-up, not two."""
    tmp, out = _child_pytest(tmp_path, "servers", "-n", "2", "--dist", "loadfile")
    assert list(out.glob("home-*"))
    shared = [json.loads(p.read_text()) for p in out.glob("shared-*")]
    assert shared  # the prefect_api_url fixture's server, one per worker that asked
    pids = [json.loads((out / "dpgnn-server").read_text()),
            *json.loads((out / "ephemeral").read_text()), *shared]
    assert [p for p in pids if not _gone(p)] == []
    assert not list(tmp.glob("dpgnn-test-home-*"))


_FLOW_ON_THE_GIVEN_SERVER = """
import tasks
from prefect import flow
from prefect.server.api.server import SubprocessASGIServer

@flow
def one() -> str:
    from prefect.runtime import flow_run
    return flow_run.id

print(one(), len(SubprocessASGIServer._instances))
"""


@_outer
@pytest.mark.slow
def test_a_process_given_prefect_api_url_starts_no_server_of_its_own(
        prefect_api_url: str, tmp_path: Path) -> None:
    """What the process tests rely on: a Prefect process (a ``dpgnn`` command) whose
    environment has the ``prefect_api_url`` fixture's URL runs its flows on that server and
    starts no temporary server of its own."""
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"DPGNN_HOME": str(tmp_path / "home"), "PREFECT_API_URL": prefect_api_url}
    r = subprocess.run([sys.executable, "-c", _FLOW_ON_THE_GIVEN_SERVER], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    run_id, servers = r.stdout.split()[-2:]
    assert servers == "0"  # no SubprocessASGIServer was started in the child
    with urllib.request.urlopen(f"{prefect_api_url}/flow_runs/{run_id}", timeout=10) as got:
        assert json.loads(got.read())["state_type"] == "COMPLETED"
    assert not (tmp_path / "home" / "prefect" / "prefect.db").exists()


def _alembic_version(db: Path) -> list[tuple[str]]:
    import sqlite3

    with sqlite3.connect(db) as con:
        return con.execute("select version_num from alembic_version").fetchall()


@_outer
def test_fresh_home_starts_with_a_migrated_prefect_database(fresh_home: Path) -> None:
    """``fresh_home`` holds a copy of the session's Prefect database, migrated to the head
    revision that this Prefect ships (so a server started on it has nothing to migrate)."""
    from alembic.script import ScriptDirectory
    from prefect.server.database import provide_database_interface
    from prefect.server.database.alembic_commands import alembic_config

    db = fresh_home / "prefect" / "prefect.db"
    assert db.is_file() and not list(fresh_home.glob("prefect/.prefect.db.*"))
    config = alembic_config()  # the SQLite migrations (Prefect's env.py picks them likewise)
    config.set_main_option("version_locations",
                           str(provide_database_interface().orm.versions_dir))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head
    assert _alembic_version(db) == [(head,)]
    template = Path(os.environ[PREFECT_TEMPLATE_ENV]) / "prefect.db"
    assert db.read_bytes() == template.read_bytes()
