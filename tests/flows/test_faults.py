"""Faults a user meets with real processes (issue 29, section 3): a sweep killed with
SIGKILL leaves no server or worker behind, and the next command ends what a killed one
left; ..."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.slow

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


def _worker(pid: int, tree: dict[int, tuple[int, str]]) -> bool:
    """Whether ``pid`` of ``tree`` (:func:`_children`) is a Dask worker process: spawned
    (``spawn_main``), or forked by the forkserver (its command line, as its parent's)."""
    ppid, args = tree[pid]
    return "spawn_main" in args or ("multiprocessing.forkserver" in args
                                    and "multiprocessing.forkserver" in tree.get(ppid, (0, ""))[1])


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.waits  # mostly on its `dpgnn` child and the seconds it has to end (Makefile)
def test_sigkilled_sweep_leaves_no_server_or_worker(dataset: Path, tmp_path: Path,
                                                    fresh_home: Path) -> None:
    """`kill -9` of `dpgnn sweep` once its ephemeral Prefect server and a Dask worker run:
    within seconds none of its processes is left (issue 29: three orphaned servers), the
    forkserver that forked the worker included."""
    spec = _sweep_spec(tmp_path / "sweep.toml", dataset, steps=20000, epsilons=[1.0])
    proc = subprocess.Popen([str(BIN / "dpgnn"), "--home", str(fresh_home), "sweep",
                             str(spec), "--workers", "1"], env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, tuple[int, str]] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            seen.update(_children(proc.pid))
            kinds = {("uvicorn" in a) + 2 * _worker(p, seen) for p, (_, a) in seen.items()}
            if {1, 2} <= kinds:  # a server and a worker
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the sweep ended before it was killed"
        assert any(_worker(p, seen) for p in seen), seen
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
    from flows.cli.common import use_server_if_running

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
        use_server_if_running()
        time.sleep(0.2)
        ended = {name for name, p in cases.items() if p.poll() is not None}
        assert ended == {"orphan"}
        assert os.environ["DPGNN_OWNER"] == me.token  # what it starts now is marked as its
    finally:
        for p in cases.values():
            p.kill()
            p.wait()
        watchdog = reaper._WATCHDOG.pop(me.token, None)  # started for this process: it
        if watchdog is not None:  # would poll until the session ends
            watchdog.kill()
            watchdog.wait()


#: One process logs a first MLflow run on a fresh home twice: quiet (no DPGNN_VERBOSE), then
#: with DPGNN_VERBOSE set (what --verbose sets) on a second fresh home; a line on both
#: streams divides what each wrote. One process, not two: its imports (Prefect, MLflow)
#: cost ~8 s of CPU.
_PHASE = "-- dpgnn test: next phase --"
_LOG_FIRST_RUNS = f"""
import os, sys
from tasks.tracking import log_run
for home, verbose in zip(sys.argv[1:], ("", "1"), strict=True):
    os.environ["DPGNN_HOME"] = home
    if verbose:
        os.environ["DPGNN_VERBOSE"] = verbose
    log_run.fn(run_name="r", params={{"a": 1}}, history_path=None,
               metrics={{"test": {{"accuracy": 0.5}}}}, artifacts=[], tags={{}})
    for stream in (sys.stdout, sys.stderr):
        print({_PHASE!r}, file=stream, flush=True)
"""


@pytest.fixture(scope="module")
def first_mlflow_runs(tmp_path_factory: pytest.TempPathFactory
                      ) -> dict[bool, tuple[Path, str]]:
    """Per ``verbose``: the fresh home of the first MLflow run and what the process wrote
    to stdout and stderr while logging it."""
    tmp = tmp_path_factory.mktemp("first-mlflow-run")
    homes = [tmp / "quiet", tmp / "verbose"]
    env = _env(DPGNN_HOME=str(homes[0]))
    for var in ("MLFLOW_LOGGING_LEVEL", "DPGNN_VERBOSE"):
        env.pop(var, None)
    r = subprocess.run([sys.executable, "-c", _LOG_FIRST_RUNS, *map(str, homes)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    outs, errs = r.stdout.split(_PHASE + "\n"), r.stderr.split(_PHASE + "\n")
    assert len(outs) == len(errs) == 3, r.stderr[-2000:]
    return {v: (homes[v], outs[v] + errs[v]) for v in (False, True)}


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [False, True])
def test_first_mlflow_run_is_quiet_unless_verbose(
        first_mlflow_runs: dict[bool, tuple[Path, str]], verbose: bool) -> None:
    """MLflow's "Creating initial MLflow database tables" INFO lines (a fresh store) reach
    the terminal only with --verbose (DPGNN_VERBOSE)."""
    home, output = first_mlflow_runs[verbose]
    assert (home / "mlflow.db").is_file()
    shown = "Creating initial MLflow database tables" in output
    assert shown == verbose, output
    if not verbose:
        assert " INFO " not in output, output


def _here(env: dict[str, str]) -> dict[str, str]:
    """What a child's environment ``env`` sets for dpgnn, for the same command run in this
    process (its home is given with ``--home``)."""
    return {k: env[k] for k in ("DPGNN_CHECKPOINT_SECONDS", "DPGNN_PROGRESS") if k in env}


def _dpgnn(args: list[str], env: dict[str, str], timeout: float = 300
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "dpgnn"), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _sweep_on_a_worker_thread(dpgnn_here: Callable[..., Any], home: Path, args: list[str],
                              api_url: str) -> Any:
    """``dpgnn sweep`` (``args``) in this process, its points on a one-thread Dask worker of
    this process (``--dask-address``): no worker process to start. Its scheduler's and
    worker's INFO records, which their own process would log, are kept quiet as
    :func:`flows.sweep.task_runner` keeps a LocalCluster's."""
    import logging

    from distributed import LocalCluster

    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=1, threads_per_worker=1, processes=False,
                dashboard_address=None) as cluster:
            return dpgnn_here(home, [*args, "--dask-address", cluster.scheduler_address],
                              {"PREFECT_API_URL": api_url})
    finally:
        logger.setLevel(level)


@pytest.mark.slow
def test_budget_running_out_mid_sweep_keeps_the_affordable_points(
        dataset: Path, tmp_path: Path, prefect_api_url: str,
        seeded_mlflow: Callable[[Path], bool], dpgnn_here: Callable[..., Any]) -> None:
    """A budget that covers one of two points: the sweep finishes with it, the table, the
    plot and MLflow mark the other refused, one `error:` line and exit 1, no traceback;
    a rerun does the same (the finished point from the cache).

    The first sweep is a `dpgnn` process on its own LocalCluster (all it and its worker
    process write to the terminal is seen); the rerun is the same command in this process
    (the same home, cache and server), its points on a Dask worker thread of this process
    (``--dask-address``): no process and no worker process to start (~30 s of CPU)."""
    import pyarrow.parquet as pq
    from mlflow.tracking import MlflowClient

    home = tmp_path / "home"
    seeded_mlflow(home)  # its MLflow store already migrated: nothing to create
    env = _env(PREFECT_API_URL=prefect_api_url)
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    budget = CliRunner().invoke(app, ["--home", str(home), "budget", "set", str(dataset),
                                      "--epsilon", "3", "--delta", "1e-3"])  # in this process
    assert budget.exit_code == 0, budget.output
    spec = _sweep_spec(tmp_path / "sweep.toml", dataset, steps=10, epsilons=[1.0, 4.0])
    args = ["sweep", str(spec), "--workers", "1", "--json"]
    for attempt in ("first", "rerun"):
        if attempt == "first":
            p = _dpgnn(["--home", str(home), *args], env)
            code, stdout, stderr = p.returncode, p.stdout, p.stderr
        else:  # its worker uses the same server, as the first's inherits it
            h = _sweep_on_a_worker_thread(dpgnn_here, home, args, prefect_api_url)
            assert h.exception is None or isinstance(h.exception, SystemExit), h.exc_info
            code, stdout, stderr = h.exit_code, h.stdout, h.stderr
        assert code == 1, (attempt, stderr[-3000:])
        errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "refused 1 of 2 points" in errors[0], stderr
        assert "Traceback" not in stderr and len(stderr.splitlines()) < 8, stderr
        summary = json.loads(stdout)
        assert [(x["epsilon"], x["refused"].split(" exceeded")[0][:23])
                for x in summary["refused"]] == [(4.0, "privacy budget of datas")]
        rows = {row["epsilon"]: row for row in pq.read_table(summary["table"]).to_pylist()}
        assert rows[4.0]["cache"] == "Refused" and rows[4.0]["test_accuracy"] is None
        assert rows[1.0]["cache"] == ("Cached" if attempt == "rerun" else "Completed")
        assert 0 <= rows[1.0]["test_accuracy"] <= 1
        assert "refused (budget)" in Path(summary["summary"]).read_text()
        assert Path(summary["privacy_utility"]).is_file()
        client = MlflowClient(summary["mlflow_tracking_uri"])
        kids = client.search_runs(
            [client.get_experiment_by_name("dpgnn-sweeps").experiment_id],
            f"tags.mlflow.parentRunId = '{summary['mlflow_parent_run_id']}'")
        assert sorted((k.data.tags.get("dpgnn.refused", "")[:7], k.info.status)
                      for k in kids) == [("", "FINISHED"), ("privacy", "FAILED")]


def _lock_holder(home: Path) -> set[int]:
    """The pids that hold (or last held) a run lock of ``home`` (flows.runlock writes its
    holder's identity into the lock file once it holds it)."""
    pids = set()
    for path in (home / "locks").glob("run-*.lock"):
        try:
            pids.add(int(json.loads(path.read_text())["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not written yet
    return pids


@pytest.mark.slow
def test_two_identical_runs_started_together_make_one_release(
        dataset: Path, tmp_path: Path, prefect_api_url: str,
        seeded_mlflow: Callable[[Path], bool], dpgnn_here: Callable[..., Any]) -> None:
    """Two identical `dpgnn run`s started together: the second waits for the first and
    reuses its model; one release, one folder, one charge to the budget.

    The first is a `dpgnn` process, the second the same command in this process, started
    once the first holds the run's lock (so it is surely the second, which a race of two
    processes left to chance): two processes, as a user's two terminals are, for the
    price of one start-up."""
    from flows import pipeline  # noqa: F401 - imported before: the second reaches the lock
    # within a second, while the first trains

    home = tmp_path / "home"
    seeded_mlflow(home)  # its MLflow store already migrated: nothing to create
    args = ["run", "dp-mlp", "--epsilon", "2", "--steps", "300", "--hidden", "8", "--device",
            "cpu", "--dataset", str(dataset), "--json"]
    env = _env(PREFECT_API_URL=prefect_api_url)
    first = subprocess.Popen([str(BIN / "dpgnn"), "--home", str(home), *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None \
                and first.pid not in _lock_holder(home):
            time.sleep(0.05)
        assert first.poll() is None, "the first run ended before it held the run lock"
        second = dpgnn_here(home, args)
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err[-3000:]
    assert second.exit_code == 0, second.output[-3000:]
    a, b = json.loads(out), json.loads(second.stdout)
    assert a["artifacts_dir"] == b["artifacts_dir"]
    assert sorted(s["cache"]["train"] for s in (a, b)) == ["Cached", "Completed"]
    release = json.loads((Path(a["artifacts_dir"]) / "report.json").read_text())["release"]
    assert all(release["id"] in s["release"] for s in (a, b))
    assert f"waiting for pid {first.pid}" in second.stderr, second.stderr
    for s in (a, b):  # the dataset's odometer counts one release of ε = 2
        assert s["dataset_epsilon_spent"] == pytest.approx(a["epsilon"], rel=1e-6)


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_keeps_a_checkpoint_and_resumes(
        dataset: Path, fresh_home: Path, seeded_mlflow: Callable[[Path], bool],
        dpgnn_here: Callable[..., Any]) -> None:
    """Ctrl-C (SIGINT to the command's process group, as a terminal sends it) during
    training: exit 130 and one `stopped:` line naming the checkpoint kept (no periodic
    checkpoint is due: DPGNN_CHECKPOINT_SECONDS is an hour); the same command resumes from
    it and finishes."""
    import re
    import threading

    seeded_mlflow(fresh_home)  # the home's MLflow store too: the resumed run migrates none
    # Long enough that the signal lands in training on a fast or loaded machine (~6 s of
    # training at ~3 ms a step on this 2-core box; the signal comes with the first progress
    # line, after 10 % of the steps or a second), and no longer: the resumed run trains the
    # rest.
    steps = 2000
    args = [str(BIN / "dpgnn"), "--home", str(fresh_home), "run", "dp-mlp",
            "--epsilon", "4", "--steps", str(steps), "--batch-size", "32", "--hidden", "8",
            "--device", "cpu", "--dataset", str(dataset), "--json"]
    env = _env(DPGNN_CHECKPOINT_SECONDS="3600", DPGNN_PROGRESS="plain")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None \
                and not any(re.search(r"step \d+/", ln) for ln in lines):
            time.sleep(0.1)
        assert proc.poll() is None, "".join(lines)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    assert proc.returncode == 130, "".join(lines)[-3000:]
    stopped = [ln for ln in lines if ln.startswith("stopped:")]
    assert len(stopped) == 1 and not any(ln.startswith("error:") for ln in lines), lines
    m = re.search(r"after step (\d+) of (\d+); checkpoint kept at (\S+):", stopped[0])
    assert m is not None and int(m.group(2)) == steps, stopped
    assert Path(m.group(3)).is_file()
    assert "Traceback" not in "".join(lines)
    # The same command again, in this process (it needs no process of its own: the signal
    # was the first's); the home's Prefect server is gone with the first, so it uses this
    # process's.
    r = dpgnn_here(fresh_home, args[3:], _here(env))
    assert r.exit_code == 0, r.output[-3000:]
    summary = json.loads(r.stdout)
    report = json.loads((Path(summary["artifacts_dir"]) / "report.json").read_text())
    assert report["release"]["resumed_from_step"] == [int(m.group(1))]
    assert not Path(m.group(3)).exists()  # the result is stored: the checkpoint cleared
    # Issue 33 §4: the resumed run continues the same release: its plan is charged once
    # (the reservation stayed with the checkpoint), and the summary and MLflow say so.
    assert "charged once" in stopped[0]
    assert summary["dataset_epsilon_spent"] == pytest.approx(summary["epsilon"], rel=1e-6)
    assert f"resumed from step {m.group(1)} of a stopped run" in summary["release"]
    assert "charged once" in summary["release"]
    from mlflow.tracking import MlflowClient

    tags = MlflowClient(summary["mlflow_tracking_uri"]).get_run(
        summary["mlflow_run_id"]).data.tags
    assert tags["dpgnn.resumed_from_step"] == m.group(1)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.waits  # on its `dpgnn` child (Makefile, WAITS)
def test_prefect_server_dying_mid_run_is_one_line_within_seconds(dataset: Path,
                                                                fresh_home: Path) -> None:
    """The ephemeral Prefect server is killed while the run trains: the command ends within
    seconds with one `error:` line naming the server (not a bare ConnectError after
    minutes of retries), and leaves no process behind."""
    import re
    import threading

    args = [str(BIN / "dpgnn"), "--home", str(fresh_home), "run", "dp-mlp",
            "--epsilon", "4", "--steps", "100000", "--hidden", "8", "--device", "cpu",
            "--dataset", str(dataset)]
    proc = subprocess.Popen(args, env=_env(DPGNN_PROGRESS="plain"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None \
                and not any(re.search(r"step \d+/", ln) for ln in lines):
            time.sleep(0.1)
        assert proc.poll() is None, "".join(lines)
        servers = [p for p, (_, a) in _children(proc.pid).items() if "uvicorn" in a]
        assert len(servers) == 1, _children(proc.pid)
        os.kill(servers[0], signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    assert proc.returncode == 1, "".join(lines)[-3000:]
    assert took < 15, f"{took:.1f} s"
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and "Prefect" in errors[0] and "server" in errors[0], lines
    assert "Traceback" not in "".join(lines) and "ConnectError" not in "".join(lines)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 96 MiB tmpfs (a small disk that a test can fill); skipped where mounting is not
    permitted (not root, or a container without the capability)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(folder: Path) -> Path:
    """Fill ``folder``'s disk: write zeros until ENOSPC."""
    filler = folder / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError:
            pass
    return filler


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.waits  # on its `dpgnn` child (Makefile, WAITS)
def test_disk_filling_during_a_run_is_one_line_and_the_next_run_is_clean(
        dataset: Path, small_disk: Path, seeded_prefect: Callable[[Path], bool],
        seeded_mlflow: Callable[[Path], bool], dpgnn_here: Callable[..., Any]) -> None:
    """The project home's disk (a small tmpfs) fills while the run trains: one `error:`
    line naming the home within seconds, exit 1, nothing half-written in the artifacts;
    once space is freed the same command finishes."""
    import re
    import threading

    home = small_disk / "home"
    # Its Prefect and MLflow databases already migrated (copies of the session's, on the
    # small disk like the rest of the home): ~20 s of CPU that shows nothing here.
    seeded_prefect(home / "prefect")
    seeded_mlflow(home)
    args = [str(BIN / "dpgnn"), "--home", str(home), "run", "dp-mlp", "--epsilon", "4",
            "--steps", "6000", "--hidden", "8", "--device", "cpu", "--dataset", str(dataset),
            "--json"]  # long enough that the disk fills while it trains: its first progress
    # line comes after a second of training (2,400 steps a second on an idle machine, 2,000
    # steps were over before it), and the run stops at the fill; the rerun trains them all
    # again (no checkpoint within 60 s)
    env = _env(DPGNN_PROGRESS="plain")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None \
                and not any(re.search(r"step \d+/", ln) for ln in lines):
            time.sleep(0.1)
        assert proc.poll() is None, "".join(lines)
        filler = _fill(small_disk)
        full = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - full
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(10)
    assert proc.returncode == 1, "".join(lines)[-3000:]
    assert took < 15, f"{took:.1f} s"
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and str(home) in errors[0] and "full" in errors[0], lines
    assert len(lines) < 10 and "Traceback" not in "".join(lines), lines
    for folder in (home / "artifacts").glob("*/[!.]*"):  # what is stored is whole (a
        # hidden .NAME.tmp-* sibling of a writer that died is never read, and removed by
        # the next writer of NAME)
        if not (folder / "manifest.json").is_file():  # evaluate: its metrics alone, whole
            json.loads((folder / "metrics.json").read_text())
            continue
        files = json.loads((folder / "manifest.json").read_text())["files"]
        assert all((folder / n).stat().st_size == f["bytes"] for n, f in files.items())
    filler.unlink()
    # The same command again, in this process (it needs no process of its own: the full
    # disk was the first's to see); the home's Prefect server is gone with the first, so it
    # uses this process's.
    r = dpgnn_here(home, args[3:], _here(env))
    assert r.exit_code == 0, r.output[-3000:]
    summary = json.loads(r.stdout)
    assert (Path(summary["artifacts_dir"]) / "model.pt").is_file()
