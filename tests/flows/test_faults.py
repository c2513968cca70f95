"""Faults a user meets with real processes (issue 29, section 3): a sweep killed with
SIGKILL leaves no server or worker behind, and the next command ends what a killed one
left; ..."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.xdist_group("prefect")

BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PREFECT_API_URL", "DPGNN_OWNER") and not k.startswith("PREFECT_")}
    return {**env, "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "DPGNN_PROGRESS": "off",
            **extra}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("faults-data") / "csbm"
    write_dataset(csbm(num_nodes=300, seed=1), folder)
    return folder


def _sweep_spec(path: Path, dataset: Path, steps: int, epsilons: list[float]) -> Path:
    path.write_text(
        f'name = "faults"\ndataset = "{dataset}"\nepsilons = {epsilons}\nseeds = [0]\n\n'
        f'[[methods]]\nmethod = "dp-mlp"\n'
        f'fixed = {{steps = {steps}, hidden = 8, accountant = "rdp", device = "cpu"}}\n')
    return path


def _children(pid: int) -> dict[int, tuple[int, str]]:
    """Every descendant of ``pid``: its pid -> (parent pid, command line)."""
    tree: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        tree[int(entry.name)] = (ppid, args)
    out, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for c, (pp, args) in tree.items():
            if pp == p and c not in out:
                out[c] = (pp, args)
                todo.append(c)
    return out


def _running(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2:state.rindex(b")") + 3] not in (b"Z", b"X")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_sigkilled_sweep_leaves_no_server_or_worker(dataset: Path, tmp_path: Path) -> None:
    """`kill -9` of `dpgnn sweep` once its ephemeral Prefect server and a Dask worker run:
    within seconds none of its processes is left (issue 29: three orphaned servers)."""
    spec = _sweep_spec(tmp_path / "sweep.toml", dataset, steps=20000, epsilons=[1.0])
    proc = subprocess.Popen([str(BIN / "dpgnn"), "--home", str(tmp_path / "home"), "sweep",
                             str(spec), "--workers", "1"], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, tuple[int, str]] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            seen.update(_children(proc.pid))
            kinds = {("uvicorn" in a) + 2 * ("spawn_main" in a) for _, a in seen.values()}
            if {1, 2} <= kinds:  # a server and a worker
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the sweep ended before it was killed"
        assert any("spawn_main" in a for _, a in seen.values()), seen
        time.sleep(1.0)
        seen.update(_children(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_running(p) for p in seen):
        time.sleep(0.2)
    left = {p: a[:120] for p, (_, a) in seen.items() if _running(p)}
    for p in left:  # the test's own clean-up, so a failure leaves nothing behind either
        os.kill(p, signal.SIGKILL)
    assert not left, f"processes outlived the killed sweep: {left}"


def _sleeper(token: str | None) -> subprocess.Popen[bytes]:
    env = _env()
    if token is not None:
        env["DPGNN_OWNER"] = token
    return subprocess.Popen(["sleep", "60"], env=env)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_next_command_ends_only_what_a_killed_one_left(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What a killed command and its killed watchdog left on this home is ended by the next
    command before it starts Prefect; processes of a live owner, of another home or without
    a token are left alone."""
    from flows import procs, reaper
    from flows.cli import _use_server_if_running

    home, other = tmp_path / "home", tmp_path / "other"
    home.mkdir()
    gone = subprocess.Popen(["sleep", "60"])  # an owner that has ended since
    dead = reaper.Owner(gone.pid, procs.start_time(gone.pid) or "", str(home.resolve()))
    gone.kill()
    gone.wait()
    me = reaper.this_process(home)
    assert me is not None
    cases = {
        "orphan": _sleeper(dead.token),
        "another home": _sleeper(reaper.Owner(dead.pid, dead.start_time,
                                              str(other.resolve())).token),
        "live owner": _sleeper(me.token),
        "no token": _sleeper(None),
    }
    try:
        time.sleep(0.3)  # exec'd: /proc shows their environment
        monkeypatch.setenv("DPGNN_HOME", str(home))
        monkeypatch.delenv("DPGNN_OWNER", raising=False)
        monkeypatch.delenv("PREFECT_API_URL", raising=False)
        _use_server_if_running()
        time.sleep(0.2)
        ended = {name for name, p in cases.items() if p.poll() is not None}
        assert ended == {"orphan"}
        assert os.environ["DPGNN_OWNER"] == me.token  # what it starts now is marked as its
    finally:
        for p in cases.values():
            p.kill()
            p.wait()
