"""`dpgnn sweep` on a real Dask cluster: results, nested MLflow runs, the cache across
reruns, an unreachable cluster refused up front, and a worker killed mid-sweep.

Every `dpgnn sweep` runs in this process (tests.flows.clirunner.dpgnn_here, as a `dpgnn`
child would run it): the points run on Dask workers, which are processes either way (the
command's LocalCluster, a cluster started here, a `dask worker` with its own environment),
and a `dpgnn` process would only add its imports; the worker-killed sweep runs in a thread
beside the test that kills its worker. The points are tiny (a 300-node cSBM, a few DP-MLP
steps): on a loaded 2-core machine the cost is process start-up (every Dask worker imports
torch and Prefect, ~10-15 s of CPU each), Prefect and the DP calibration, not training:
each test starts as few processes as its behaviour needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tasks  # noqa: F401 - sets Prefect's environment (inherited by Dask workers)
from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm
from tests.flows.clirunner import CliRunner, Completed, dpgnn_here

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return {**env, "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("sweep-data") / "csbm"
    write_dataset(csbm(num_nodes=300, seed=1), folder)
    return folder


def _spec_file(path: Path, name: str, dataset: Path, steps: int, lrs: list[float],
               epsilons: list[float], reference: bool = True) -> Path:
    text = (f'name = "{name}"\ndataset = "{dataset}"\nepsilons = {epsilons}\nseeds = [0]\n\n'
            f'[[methods]]\nmethod = "dp-mlp"\ngrid = {{lr = {lrs}}}\n'
            f'fixed = {{steps = {steps}, hidden = 16, accountant = "rdp", device = "cpu"}}\n')
    if reference:
        text += ('\n[[methods]]\nmethod = "mlp"\n'
                 'fixed = {epochs = 10, hidden = 16, device = "cpu"}\n')
    path.write_text(text)
    return path


def _table(summary: dict[str, Any]) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(summary["table"]).to_pylist()


def _code_version() -> str:
    from tasks.config import code_version

    return code_version.__wrapped__()  # uncached: other work may edit the tree meanwhile


def _trained(home: Path) -> dict[str, int]:
    """model.pt of every train artifact under ``home``, by path: its mtime."""
    return {str(p): p.stat().st_mtime_ns
            for p in (home / "artifacts" / "train").glob("*/model.pt")}


def test_sweep_on_a_local_cluster_logs_nested_runs_and_reruns_from_cache(
        dataset: Path, tmp_path: Path, prefect_api_url: str) -> None:
    """dp-mlp 2 lr × 2 ε plus an mlp reference (5 points) on a LocalCluster of 2 workers;
    then the same sweep again, on a LocalCluster of 1 worker (each worker is a process
    that imports torch and Prefect: the rerun only reads the cache records, which the two
    workers of the first run wrote): every point cached, nothing trained."""
    from mlflow.tracking import MlflowClient

    spec = _spec_file(tmp_path / "sweep.toml", "local2", dataset, steps=8,
                      lrs=[3e-3, 1e-2], epsilons=[2.0, 8.0])
    home = tmp_path / "home"
    args = ["--home", str(home), "sweep", str(spec), "--json"]
    version = _code_version()
    # in this process: the points run on the LocalCluster's workers (processes) either
    # way, and a `dpgnn` process would only add its imports
    r = dpgnn_here([*args, "--workers", "2"], api_url=prefect_api_url, reraise=True)
    assert r.returncode == 0, r.stderr[-3000:]
    first = json.loads(r.stdout)
    assert first["points"] == 5
    for key in ("table", "csv", "privacy_utility", "hyperparameters"):
        assert Path(first[key]).is_file(), key
    assert Path(first["privacy_utility"]).read_bytes()[:4] == b"\x89PNG"
    rows = _table(first)
    assert len(rows) == 5 and {r["cache"] for r in rows} == {"Completed"}
    assert sorted((r["method"], r["epsilon"]) for r in rows) == [
        ("dp-mlp", 2.0), ("dp-mlp", 2.0), ("dp-mlp", 8.0), ("dp-mlp", 8.0), ("mlp", None)]
    best = {(b["method"], b["epsilon"]) for b in first["best"]}
    assert best == {("dp-mlp", 2.0), ("dp-mlp", 8.0), ("mlp", None)}
    assert all(b["candidates"] == (2 if b["epsilon"] else 1) for b in first["best"])

    # MLflow: one parent run, one nested child per point
    parent_id = first["mlflow_parent_run_id"]
    assert parent_id and first["mlflow_tracking_uri"].startswith("sqlite:///")
    assert str(home) in first["mlflow_tracking_uri"]
    client = MlflowClient(first["mlflow_tracking_uri"])
    exp = client.get_experiment_by_name("dpgnn-sweeps")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    parents = [x for x in runs if x.data.tags.get("dpgnn.sweep") == "true"]
    children = [x for x in runs if "mlflow.parentRunId" in x.data.tags]
    assert [p.info.run_id for p in parents] == [parent_id]
    assert len(runs) == 6 and len(children) == 5
    assert {c.data.tags["mlflow.parentRunId"] for c in children} == {parent_id}
    assert sorted(c.data.tags["dpgnn.config"] for c in children) == sorted(
        row["config_id"] for row in rows)
    assert all(c.info.status == "FINISHED" for c in runs)
    assert sum(c.data.tags.get("dpgnn.selected") == "true" for c in children) == 3
    assert parents[0].data.tags["dpgnn.points"] == "5"
    # each child is a run as a single run is (issue 52 §3): the documented name, its
    # artifacts, and its own span (training start to evaluation end) within the sweep's
    parent = parents[0]
    for c in children:
        assert parent.info.start_time <= c.info.start_time < c.info.end_time \
            <= parent.info.end_time
        names = {a.path for a in client.list_artifacts(c.info.run_id)}
        assert {"manifest.json", "history.json", "metrics.json"} <= names, names
        if c.data.tags["dpgnn.private"] == "true":
            assert {"ledger.json", "report.json"} <= names
            assert re.fullmatch(r"dp-mlp-csbm\S*-eps[28]-node-s0-[0-9a-f]{12}",
                                c.info.run_name), c.info.run_name
        else:
            assert re.fullmatch(r"mlp-csbm\S*-s0", c.info.run_name), c.info.run_name

    # the same sweep again: every point from the cache, no training
    trained = _trained(home)
    assert len(trained) == 5
    for _attempt in range(2):
        r = dpgnn_here([*args, "--workers", "1"], api_url=prefect_api_url, reraise=True)
        assert r.returncode == 0, r.stderr[-3000:]
        again = json.loads(r.stdout)
        now = _code_version()
        if now == version:
            break
        version = now  # the source changed under us (other work on the tree): once more
    rows = _table(again)
    assert [row["cache"] for row in rows] == ["Cached"] * 5
    assert _trained(home) == trained  # no model written again
    assert "step 8/8" not in r.stderr  # no training progress
    assert again["table"] == first["table"]
    parent2 = again["mlflow_parent_run_id"]
    assert parent2 and parent2 != parent_id
    kids = client.search_runs([exp.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = '{parent2}'")
    assert len(kids) == 5 and {k.data.tags["dpgnn.cache"] for k in kids} == {"Cached"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_cluster_is_refused_before_any_point(dataset: Path, tmp_path: Path
                                                         ) -> None:
    """In this process (the refusal comes before Prefect or Dask start, so a subprocess
    would only add its imports): one ``error:`` line, exit 2, nothing written."""
    from flows.cli import app

    spec = _spec_file(tmp_path / "sweep.toml", "noclu", dataset, steps=5, lrs=[1e-2],
                      epsilons=[4.0])
    home = tmp_path / "home"
    address = f"tcp://127.0.0.1:{_closed_port()}"
    # imported first: the bound below is on the wait, not on imports (minutes on a loaded
    # machine), and distributed's log handler must not keep the runner's stderr
    import distributed  # noqa: F401

    import flows.sweep  # noqa: F401

    t = time.perf_counter()
    r = CliRunner().invoke(app, ["--home", str(home), "sweep", str(spec),
                                 "--dask-address", address])
    wall = time.perf_counter() - t
    assert r.exit_code == 2, r.output[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert address in lines[0] and "does not answer" in lines[0]
    assert r.stdout == ""
    assert wall < 30, wall  # a sanity bound (the check waits 5 s), not a benchmark
    assert not (home / "artifacts").exists() and not (home / "sweeps").exists()


def test_a_bad_yaml_spec_is_one_error_line(tmp_path: Path) -> None:
    from flows.cli import app

    spec = tmp_path / "broken.yaml"
    spec.write_text("name: [unclosed\n")
    r = CliRunner().invoke(app, ["--home", str(tmp_path / "home"), "sweep", str(spec)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot parse the sweep spec"), \
        r.output
    assert str(spec) in lines[0]


def _started(call: Callable[[], Completed]
             ) -> tuple[threading.Thread, dict[str, Completed | BaseException]]:
    """``call()`` started in a thread; the dict gets its result (or what it raised) under
    ``"ended"`` when it ends."""
    ended: dict[str, Completed | BaseException] = {}

    def run() -> None:
        try:
            ended["ended"] = call()
        except BaseException as e:  # the test shows it
            ended["ended"] = e

    thread = threading.Thread(target=run, name="dpgnn-here", daemon=True)
    thread.start()
    return thread, ended


def test_worker_killed_mid_sweep(dataset: Path, tmp_path: Path, prefect_api_url: str) -> None:
    """A worker process is SIGKILLed while it runs a point of a sweep on an external
    cluster (one single-threaded worker under a nanny, started here: a second worker
    would only be another process importing torch and Prefect; with one, every point
    after the kill runs on the worker the nanny restarted).

    What happened (Prefect 3.8.8, prefect-dask 0.3.7, distributed 2026.8.0): the scheduler
    removed the lost worker and rescheduled its ``train`` task; the nanny restarted the
    killed worker within ~3 s, the rescheduled Prefect task run went through (the killed
    attempt wrote nothing: artifacts are written atomically) and the sweep COMPLETED with
    all 4 points (on the loaded 2-core machine: killed 46 s in, most of it Prefect's
    start-up; done 119 s in). The rerun took 29 s with 4/4 points cached. (With one
    worker the scheduler holds the point until the restarted worker joins, then reruns
    it there.) The test also
    accepts the other outcome (the sweep fails with exit 1 and one ``error:`` line); the
    rerun (on the same cluster) must then finish, reusing every point the first run
    finished.

    Both runs are ``dpgnn`` commands in this process (the process killed is the worker,
    not the command's): the first through ``dpgnn``'s entry point in a thread beside the
    test (an error the command lets through is its one ``error:`` line and exit 1, as in a
    ``dpgnn`` process), the rerun after it.
    """
    from distributed import Client

    from dpgnn_core.home import project_dir
    from flows.sweep import local_cluster

    home = project_dir()  # the workers inherit this process's project (and Prefect) home
    spec = _spec_file(tmp_path / "sweep.toml", f"kill-{os.getpid()}", dataset, steps=40,
                      lrs=[3e-3, 1e-2], epsilons=[2.0, 8.0], reference=False)
    # its worker forked from this process's forkserver as a sweep's (no start-up of its
    # own), the one the nanny restarts after the kill spawned
    with local_cluster("forkserver", n_workers=1, threads_per_worker=1, processes=True,
                       dashboard_address=None) as cluster, Client(cluster) as client:
        args = ["sweep", str(spec), "--dask-address", cluster.scheduler_address, "--json"]
        # the command in this process, beside the test (its worker is the process killed)
        first_run, ended = _started(lambda: dpgnn_here(args, api_url=prefect_api_url,
                                                       main=True))
        try:
            t0 = time.monotonic()
            deadline = t0 + 240
            busy: list[str] = []
            while not busy:
                assert first_run.is_alive(), ended
                assert time.monotonic() < deadline, "no task started"
                busy = [w for w, keys in client.processing().items()
                        if any("train" in str(k) for k in keys)]
                time.sleep(0.05)
            # at once: on an idle machine the four points take about two seconds in all
            # (a sleep of 2 s here once let the sweep end before the kill)
            pids = client.run(os.getpid)
            victim = busy[0]
            os.kill(pids[victim], signal.SIGKILL)
            killed_at = time.monotonic() - t0
            first_run.join(timeout=400)
            first_s = time.monotonic() - t0
        finally:
            if first_run.is_alive():  # the test failed: its cluster ends the command
                cluster.close()
                first_run.join(timeout=60)
        assert not first_run.is_alive(), "the first run did not end"
        (proc,) = ended.values()
        assert isinstance(proc, Completed), proc
        first_err = proc.stderr
        done_before = _trained(home)
        if proc.returncode == 0:
            outcome = "completed"
            first = json.loads(proc.stdout)
            assert first["points"] == 4
            assert {row["cache"] for row in _table(first)} <= {"Completed", "Cached"}
        else:
            outcome = "failed"
            errors = [x for x in first_err.splitlines() if x.startswith("error: ")]
            assert proc.returncode == 1 and len(errors) == 1, first_err[-3000:]
        # the nanny brings the killed worker back (under another address; until the
        # scheduler has removed the killed one, wait_for_workers(1) counts it)
        deadline = time.monotonic() + 60
        while set(client.scheduler_info()["workers"]) - {victim} == set():
            assert time.monotonic() < deadline, "the nanny did not restart the worker"
            time.sleep(0.2)
        t = time.perf_counter()
        r = dpgnn_here(args, api_url=prefect_api_url, reraise=True)  # on the same workers
        rerun_s = time.perf_counter() - t
    assert r.returncode == 0, r.stderr[-3000:]
    again = json.loads(r.stdout)
    rows = _table(again)
    assert len(rows) == 4
    cached = [row for row in rows if row["cache"] == "Cached"]
    finished = set(done_before)
    if outcome == "completed":
        assert len(cached) == 4, rows
    else:
        # every point the first run finished is reused
        reused = {str(Path(row["artifacts_dir"]) / "model.pt") for row in cached}
        assert {p for p in finished if Path(p).parent.name in {
            Path(row["artifacts_dir"]).name for row in rows}} <= reused
    print(f"worker killed {killed_at:.1f} s into the sweep: first run {outcome} after "
          f"{first_s:.1f} s; rerun {rerun_s:.1f} s with "
          f"{len(cached)}/4 points cached")


@contextlib.contextmanager
def _external_worker(tmp_path: Path, env: dict[str, str]) -> Iterator[str]:
    """A Dask scheduler here and one single-threaded ``dask worker`` process with its own
    environment ``env`` (another DPGNN_HOME, working directory, perhaps another code), as
    on another host; yields the scheduler's address."""
    from distributed import Client, LocalCluster

    cwd = tmp_path / "worker-cwd"
    cwd.mkdir(exist_ok=True)
    with LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        proc = subprocess.Popen([str(BIN / "dask"), "worker", cluster.scheduler_address,
                                 "--nthreads", "1", "--no-dashboard"], env=env, cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(1, timeout=120)
            yield cluster.scheduler_address
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _worker_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker with its own project home (nothing of this process's
    DPGNN_HOME, Prefect home or storage path)."""
    # (and not the MALLOC_TRIM_THRESHOLD_ that a nanny of an earlier test's LocalCluster
    # exported into this process's environment: a worker's shell would not have it)
    env = {k: v for k, v in _env().items()
           if k not in ("DPGNN_HOME", "PREFECT_HOME", "PREFECT_LOCAL_STORAGE_PATH",
                        "MALLOC_TRIM_THRESHOLD_")}
    return {**env, "DPGNN_HOME": str(home), **extra}


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_external_worker_writes_into_the_sweeps_home(dataset: Path, tmp_path: Path,
                                                     prefect_api_url: str) -> None:
    """A worker whose DPGNN_HOME points elsewhere writes the point's artifacts, Prefect's
    cache records and the budget record into the sweep's --home, nothing into its own."""
    spec = _spec_file(tmp_path / "sweep.toml", "ext-home", dataset, steps=4, lrs=[1e-2],
                      epsilons=[4.0], reference=False)
    home, elsewhere = tmp_path / "home", tmp_path / "worker-home"
    # the command in this process (the worker is the process of its own environment), its
    # Prefect results under --home (home/cache), where a `dpgnn --home` process puts them
    with _external_worker(tmp_path, _worker_env(elsewhere)) as address:
        r = dpgnn_here(["sweep", str(spec), "--dask-address", address, "--json"],
                       home=home, api_url=prefect_api_url, reraise=True)
    assert r.returncode == 0, r.stderr[-3000:]
    # a worker started by plain `dask worker` has the nanny's malloc setting: said up front
    (slow,) = [x for x in r.stderr.splitlines() if "MALLOC_TRIM_THRESHOLD_" in x]
    assert slow.startswith("warning: 1 of the 1 Dask workers") \
        and "deployments/dask-worker.yaml" in slow, slow
    (row,) = _table(json.loads(r.stdout))
    assert Path(row["artifacts_dir"]).parent.parent == home.resolve() / "artifacts"
    assert len(_trained(home)) == 1 and _files(home / "cache")
    from dpgnn_core.budget import BudgetStore, default_store_path

    s = BudgetStore(default_store_path(home.resolve()))
    records = s.summary(s.resolve(json.loads((dataset / "manifest.json").read_text())[
        "content_sha256"])).records
    assert [r.status for r in records] == ["spent"]
    # the worker's own home: Prefect's settings folders at most, no artifact, cache record
    # or budget store
    assert not (elsewhere / "artifacts").exists()
    assert not (elsewhere / "budget.sqlite").exists()
    assert _files(elsewhere / "cache") == []


def test_external_worker_with_other_code_fails_its_point(dataset: Path, tmp_path: Path,
                                                         prefect_api_url: str) -> None:
    """A worker importing another dpgnn source tree (one comment added) fails the point
    with one error line naming both code versions; nothing is trained."""
    import shutil

    root = Path(__file__).resolve().parents[2]
    other = tmp_path / "other-code"
    for pkg in ("dpgnn_core", "tasks", "flows"):
        shutil.copytree(root / pkg, other / pkg,
                        ignore=shutil.ignore_patterns("__pycache__"))
    with (other / "dpgnn_core" / "__init__.py").open("a") as f:
        f.write("# another version\n")
    spec = _spec_file(tmp_path / "sweep.toml", "ext-code", dataset, steps=4, lrs=[1e-2],
                      epsilons=[4.0], reference=False)
    home = tmp_path / "home"
    # started as the README says (deployments/dask-worker.yaml): no allocator warning
    env = _worker_env(tmp_path / "worker-home", PYTHONPATH=str(other),
                      DASK_CONFIG=str(root / "deployments" / "dask-worker.yaml"))
    with _external_worker(tmp_path, env) as address:  # the command in this process
        r = dpgnn_here(["--home", str(home), "sweep", str(spec), "--dask-address",
                        address, "--json"], api_url=prefect_api_url, reraise=True)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "MALLOC_TRIM_THRESHOLD_" not in r.stderr, r.stderr[-3000:]
    errors = [x for x in r.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1, r.stderr[-3000:]
    assert "code version" in errors[0] and _code_version()[:12] in errors[0], errors[0]
    assert _trained(home) == {} and _trained(tmp_path / "worker-home") == {}


@pytest.mark.parametrize("earlier_nanny", [False, True])
def test_local_cluster_workers_keep_the_allocators_dynamic_mmap_threshold(
        earlier_nanny: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """distributed's nanny exports MALLOC_TRIM_THRESHOLD_ to its workers, which makes torch
    ~2.4x slower there (benchmarks/RESULTS.md); the sweep's LocalCluster workers must not
    have it, also when a nanny started earlier in this process (with distributed's
    defaults) left it in this process's environment. And the workers report to this
    process's Prefect server."""
    from flows.sweep import NANNY_DEFAULT_TRIM, task_runner

    if earlier_nanny:
        monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", NANNY_DEFAULT_TRIM)
    else:
        monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    runner = task_runner(workers=1)
    with runner:  # os.getenv, not flows.sweep's probe: that would import torch on the worker
        found = runner.client.run(os.getenv, "MALLOC_TRIM_THRESHOLD_")
        api = runner.client.run(os.getenv, "PREFECT_API_URL")
    assert list(found.values()) == [None], found
    # Without PREFECT_API_URL, the workers report to this process's temporary Prefect
    # server (started before the cluster) instead of each starting one of their own.
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    assert server.running and list(api.values()) == [server.api_url], api


#: Evaluated on a worker (``client.run(eval, ...)``: nothing of this module is imported
#: there): whether torch was imported before this line, what the worker sees of the
#: environment, torch's intra-op threads, its parent process and that one's environment
#: when it started (a forkserver's: distributed's pre-spawn settings, as this process had
#: them when it started the server).
_WORKER_VIEW = ("('torch' in __import__('sys').modules, __import__('os').environ.get("
                "'DPGNN_HOME'), __import__('os').environ.get('DPGNN_TEST_PROBE'), "
                "__import__('torch').get_num_threads(), __import__('os').getppid(), "
                "open(f\"/proc/{__import__('os').getppid()}/cmdline\").read(), "
                "open(f\"/proc/{__import__('os').getppid()}/environ\", 'rb').read())")


def test_two_sweeps_in_one_process_each_give_their_workers_their_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two local clusters of flows.sweep.task_runner in this process, as a notebook's two
    sweeps with different homes: the workers of both are forked from one forkserver that
    imported torch (torch is there before the worker imports it), and each sees this
    process's environment as it was when its sweep started, not the forkserver's (the
    first sweep's): the second's DPGNN_HOME, and a variable unset in between gone.
    distributed's pre-spawn settings were this process's when it started the forkserver
    (OMP_NUM_THREADS=1, no MALLOC_TRIM_THRESHOLD_), and torch's threads follow them."""
    from flows.sweep import task_runner

    monkeypatch.delenv("DPGNN_WORKER_START", raising=False)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    seen = []
    for home, probe in ((tmp_path / "first", "set"), (tmp_path / "second", None)):
        monkeypatch.setenv("DPGNN_HOME", str(home))
        if probe is None:
            monkeypatch.delenv("DPGNN_TEST_PROBE")
        else:
            monkeypatch.setenv("DPGNN_TEST_PROBE", probe)
        with task_runner(workers=1) as runner:
            (view,) = runner.client.run(eval, _WORKER_VIEW).values()
        seen.append(view)
    first, second = seen
    assert first[:4] == (True, str(tmp_path / "first"), "set", threads), first
    assert second[:4] == (True, str(tmp_path / "second"), None, threads), second
    # one forkserver (not this process) forked both
    assert first[4] == second[4] != os.getpid()
    assert "multiprocessing.forkserver" in first[5], first[5]
    server_env = first[6].split(b"\0")
    assert f"OMP_NUM_THREADS={threads}".encode() in server_env
    assert not any(v.startswith(b"MALLOC_TRIM_THRESHOLD_=") for v in server_env)


def test_worker_start_spawn_on_request_and_a_bad_value_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """DPGNN_WORKER_START=spawn: the worker is a child of this process that imported
    nothing of torch; another value is one error naming the variable and the value."""
    from dpgnn_core.errors import DpgnnError
    from flows.sweep import task_runner

    monkeypatch.setenv("DPGNN_WORKER_START", "fork")
    with pytest.raises(DpgnnError, match=r"^DPGNN_WORKER_START='fork' is not a worker start"):
        task_runner(workers=1)
    monkeypatch.setenv("DPGNN_WORKER_START", "spawn")
    with task_runner(workers=1) as runner:
        (view,) = runner.client.run(eval, _WORKER_VIEW).values()
    assert view[0] is False and view[4] == os.getpid(), view[:5]
