"""Integration: a real warm runner (:mod:`flows.warm`) runs ``dpgnn run`` as a local
process would, and a killed or interrupted client ends the command it runs."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flows import warm_env, warm_state

# `waits`: it waits on real processes (the runner's imports, commands it forks, a killed
# client): `make test` runs it beside the main xdist workers (Makefile, WAITS).
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.waits]

#: The ``dpgnn`` script as pip writes it for ``[project.scripts]`` (``flows.warm_client``).
SCRIPT = ("#!{python}\nimport sys\nfrom flows.warm_client import main\n"
          "if __name__ == '__main__':\n"
          "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n    sys.exit(main())\n")


def _dpgnn(tmp_path: Path) -> Path:
    script = tmp_path / "bin" / "dpgnn"
    script.parent.mkdir(exist_ok=True)
    script.write_text(SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    return script


def _normalised(text: str) -> list[str]:
    """Lines without what differs between two runs of different seeds: numbers, ids,
    durations, progress lines."""
    out = []
    for line in text.splitlines():
        if re.search(r"step \d+/\d+", line):
            continue
        line = re.sub(r"[0-9a-f]{16,}", "ID", line)
        out.append(re.sub(r"\d+(\.\d+)?", "N", line))
    return out


def _budget(home: Path, *args: str) -> str:
    """A ``dpgnn budget`` command in this process (a subprocess costs seconds of imports)."""
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    r = CliRunner().invoke(app, ["--home", str(home), "budget", *args])
    assert r.exit_code == 0, r.output
    return str(r.stdout)


def _ended(home: Path) -> str:
    """Why ``home``'s runner is not running: its state file, its log, and its exit status
    (it is this process's child here)."""
    state = warm_env.state_path(home)
    info = json.loads(state.read_text()) if state.is_file() else {}
    how = "no state file"
    if info.get("pid"):
        try:
            pid, status = os.waitpid(int(info["pid"]), os.WNOHANG)
            how = (f"pid {info['pid']} still running (another process?)" if pid == 0 else
                   f"exit code {os.waitstatus_to_exitcode(status)} (negative: a signal)")
        except ChildProcessError:
            how = f"pid {info['pid']} is not this process's child"
    return f"runner not running: {how}; state {info}; log: {(home / 'warm.log').read_text()!r}"


def _wait_ready(home: Path, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = warm_state.status(home)
        assert st["running"], _ended(home)
        if st["ready"]:
            return st
        time.sleep(0.2)
    pytest.fail("the warm runner did not start serving")


def _child_pid(proc: subprocess.Popen[str]) -> int:
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"running in the warm runner \(pid (\d+)\)", line)
        if m:
            return int(m.group(1))
    pytest.fail("the command did not run in the warm runner")


def _client(dpgnn: Path, env: dict[str, str], ds: Path, seed: str, *more: str
            ) -> subprocess.Popen[str]:
    return subprocess.Popen([dpgnn, "-v", "run", "dp-mlp", "--dataset", str(ds), "--epsilon",
                             "2", "--seed", seed, *more], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _gone(pid: int, timeout: float = 20) -> bool:
    """Whether ``pid`` ends within ``timeout`` (a zombie counts as ended: the runner is this
    process's child here, which only ``dpgnn server start``'s exit would hand to init)."""
    from flows import procs

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if procs.start_time(pid) is None:
            return True
        time.sleep(0.1)
    return False


def test_a_delegated_run_matches_a_local_run(tmp_path: Path, fresh_home: Path,
                                             prefect_api_url: str) -> None:
    """One runner: a ``dpgnn run dp-mlp`` through it and one run locally
    (``DPGNN_WARM=0``) give the same exit code, the same lines and the same budget charge;
    a refused command's exit code and error line too; then SIGKILL of a client kills its
    command, and a Ctrl-C reaches it."""
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    ds = tmp_path / "syn"
    r = CliRunner().invoke(app, ["ingest", "--format", "synthetic", "--out", str(ds),
                                 "-o", "num_nodes=300"])
    assert r.exit_code == 0, r.output
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env |= {"DPGNN_HOME": str(fresh_home), "PREFECT_API_URL": prefect_api_url,
            "DPGNN_WARM": "1"}  # the suite's default is 0 (tests/conftest.py)
    dpgnn = _dpgnn(tmp_path)
    _budget(fresh_home, "set", str(ds), "--epsilon", "30", "--delta", "1e-3")
    warm_env.one_thread_unless_set(env)
    warm_state.start(fresh_home, env)
    try:
        runner = _wait_ready(fresh_home)
        # fork safety: the runner has one thread and imported none of dpgnn, Prefect, MLflow
        assert len(os.listdir(f"/proc/{runner['pid']}/task")) == 1
        outputs = []
        for seed, flag in (("1", "1"), ("2", "0")):
            p = subprocess.run([dpgnn, "run", "dp-mlp", "--dataset", str(ds), "--epsilon",
                                "1", "--seed", seed], env={**env, "DPGNN_WARM": flag},
                               capture_output=True, text=True, cwd=tmp_path)
            outputs.append((p.returncode, _normalised(p.stdout), _normalised(p.stderr)))
        log = (fresh_home / "warm.log").read_text()
        assert "--seed 1` as pid" in log and "--seed 2" not in log  # where each ran
        assert outputs[0] == outputs[1] and outputs[0][0] == 0, outputs
        records = json.loads(_budget(fresh_home, "show", str(ds), "--json"))
        records = records["datasets"][0]["records"]
        keys = ("status", "method", "units", "epsilon", "delta", "ledger")
        assert len(records) == 2
        assert [records[0][k] for k in keys] == [records[1][k] for k in keys]

        bad = [subprocess.run([dpgnn, "run", "dp-mlp", "--dataset", str(tmp_path / "none")],
                              env={**env, "DPGNN_WARM": flag}, capture_output=True,
                              text=True, cwd=tmp_path) for flag in ("1", "0")]
        assert bad[0].returncode == bad[1].returncode == 2
        assert bad[0].stdout == bad[1].stdout and bad[0].stderr == bad[1].stderr != ""

        # SIGKILL of the client as soon as its command runs: the command is killed
        proc = _client(dpgnn, env, ds, "3")
        child = _child_pid(proc)
        proc.kill()
        proc.communicate(timeout=60)
        assert _gone(child), f"the command (pid {child}) outlived its killed client"
        # Ctrl-C of the client once the flow runs: the command stops as a local one does
        proc = _client(dpgnn, env, ds, "4", "--steps", "20000", "--accountant", "rdp")
        child = _child_pid(proc)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "(Prefect flow)" in line:
                time.sleep(1)
                proc.send_signal(signal.SIGINT)
                break
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130 and "stopped:" in err, err
        assert _gone(child)
        # A runner nobody can reach any more (its home or socket removed: a test's tmp
        # folder deleted) stops by itself; `server stop` is tests/flows/test_servers.py's.
        warm_env.socket_path(fresh_home).unlink()
        assert _gone(runner["pid"]), "a runner whose socket is gone stayed behind"
        assert not warm_state.status(fresh_home)["running"]
    finally:
        warm_state.stop(fresh_home)
