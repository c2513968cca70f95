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


@_probe
@pytest.mark.skipif("servers" not in PROBE, reason="servers only when asked")
def test_probe_leaves_a_dpgnn_server_running(home: Path) -> None:
    from flows import server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    info = server.start(port=port, home=home)
    _out("dpgnn-server", info["pid"])


@_probe
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


def _child_pytest(tmp_path: Path, probe: str, *args: str) -> tuple[Path, Path]:
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    out.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_", "MLFLOW_", "PYTEST_", "DPGNN_"))}
    env |= {"TMPDIR": str(tmp), "DPGNN_CLEANUP_PROBE": probe,
            "DPGNN_CLEANUP_PROBE_OUT": str(out), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1"}
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
    tmp, out = _child_pytest(tmp_path, "1", "-p", "no:xdist")
    homes = [json.loads(p.read_text()) for p in out.glob("home-*")]
    assert len(homes) == 1 and homes[0].startswith(str(tmp))
    assert not list(tmp.glob("dpgnn-test-home-*"))


@_outer
@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.xdist_group("prefect")
def test_no_test_home_or_server_is_left_behind_with_xdist(tmp_path: Path) -> None:
    """Two xdist workers (each with its home), a `dpgnn server` and Prefect's ephemeral
    server started under a test home: all stopped, every home removed."""
    tmp, out = _child_pytest(tmp_path, "servers", "-n", "2")
    assert list(out.glob("home-*"))
    pids = [json.loads((out / "dpgnn-server").read_text()),
            *json.loads((out / "ephemeral").read_text())]
    assert [p for p in pids if not _gone(p)] == []
    assert not list(tmp.glob("dpgnn-test-home-*"))
