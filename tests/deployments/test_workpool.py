"""Integration: the work-pool route of docs/user-guide.md ("Scheduled private retraining")
as written, against a real Prefect server: ``prefect work-pool create dpgnn --type
process``, ``prefect deploy --prefect-file deployments/prefect.yaml --name private-retrain``
from the repository root with ``DPGNN_RETRAIN_DATASET`` set, ``prefect worker start
--pool dpgnn`` started in another folder, and ``prefect deployment schedule create ...
--cron '* * * * *'``: within the next minute the server's scheduler creates a run that
nobody triggers, the worker runs it, and it completes, spends budget and leaves its summary
in its flow run's log. With SQLAlchemy 2.1.x, Prefect 3.8.8's scheduler created no run.

The server is ``dpgnn server start``'s, scheduler on (``scheduling_server``). The
``prefect`` commands that only talk to it (``work-pool create``, ``deploy``, ``deployment
schedule create``) run in this process, through
Prefect's own command line (its ``deploy`` imports the flow's module: 10 s more as a
process); the worker, and the flow run's process it starts, are real processes: the worker
runs in its own session, and it and everything it started are stopped at the end, whatever
happened.
"""

from __future__ import annotations

import contextlib
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

from tests.deployments.test_retrain import (
    _api,
    _clean_env,
    _delete_deployments,
    _first_scheduled_run,
    _prefect,
)
from tests.flows.test_servers import _ingest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
#: The smallest private run that still makes a release: dp-mlp, a few steps.
SPEC = {"method": "dp-mlp", "epsilon": 2.0, "steps": 10, "hidden": 8}
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


@contextlib.contextmanager
def _worker(env: dict[str, str], cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``prefect worker start --pool dpgnn`` in its own session; at the end, the worker's
    process group and every process it started (a flow run's process runs in a session of
    its own) are stopped."""
    import psutil

    with log.open("wb") as out:
        proc = subprocess.Popen([BIN / "prefect", "worker", "start", "--pool", "dpgnn"],
                                cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(proc.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # our worker's group only
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.terminate()
        _, alive = psutil.wait_procs([psutil.Process(proc.pid), *children]
                                     if proc.poll() is None else children, timeout=30)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        proc.wait(timeout=30)


def _logs(url: str, run_id: str) -> list[dict[str, Any]]:
    return list(_api(url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}},
                                           "sort": "TIMESTAMP_ASC", "limit": 200}))


@pytest.mark.waits
def test_work_pool_route_as_documented(tmp_path: Path, fresh_home: Path,
                                       on_server: str,
                                       seeded_mlflow: Callable[[Path], bool],
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from dpgnn_core.budget import BudgetStore

    seeded_mlflow(fresh_home)  # the flow run's MLflow store, already migrated
    url, ds = on_server, tmp_path / "ds"
    _ingest(ds, {})
    env = {**_clean_env(fresh_home), "PREFECT_API_URL": url}
    monkeypatch.chdir(ROOT)  # `prefect deploy` from the repository root
    monkeypatch.setenv("DPGNN_RETRAIN_DATASET", str(ds))
    _delete_deployments(url, "dpgnn-retrain", "private-retrain")  # test_retrain.py's
    out = _prefect(["work-pool", "create", "dpgnn", "--type", "process"], capsys)
    (pool,) = _api(url, "/work_pools/filter", {"work_pools": {"name": {"any_": ["dpgnn"]}}})
    assert pool["type"] == "process", out
    out = _prefect(["deploy", "--prefect-file", "deployments/prefect.yaml",
                    "--name", "private-retrain", "--param", f"spec={json.dumps(SPEC)}"],
                   capsys)
    assert "dpgnn-retrain/private-retrain" in out
    (dep,) = _api(url, "/deployments/filter", {"deployments": {"name": {
        "any_": ["private-retrain"]}}})
    # The run starts in the folder `prefect deploy` ran in: this checkout, no variable.
    assert dep["pull_steps"] == [{"prefect.deployments.steps.set_working_directory": {
        "directory": str(ROOT)}}]
    assert dep["parameters"]["dataset"] == str(ds)

    elsewhere = tmp_path / "elsewhere"  # the worker's own folder is not the checkout
    elsewhere.mkdir()
    with _worker(env, elsewhere, tmp_path / "worker.log") as worker:
        _prefect(["deployment", "schedule", "create", "dpgnn-retrain/private-retrain",
                  "--cron", "* * * * *", "--timezone", "UTC"], capsys)
        got = _first_scheduled_run(url, dep["id"], worker, tmp_path / "worker.log")
        assert got["state_type"] == "COMPLETED", (
            got["state"], (tmp_path / "worker.log").read_text()[-4000:])
        summary, deadline = "", time.time() + 60
        while not summary and time.time() < deadline:  # the process flushes its logs
            summary = next((r["message"] for r in _logs(url, got["id"])
                            if "new release" in r["message"]), "")
            time.sleep(0.5)
    # Nobody triggered it: the schedule created it, for a whole minute.
    assert got["auto_scheduled"] is True and got["created_by"]["type"] == "SCHEDULE"
    assert got["expected_start_time"].endswith(":00Z"), got["expected_start_time"]

    # The release was charged to the dataset's budget in the worker's project home.
    store = BudgetStore(fresh_home / "budget.sqlite")
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    records = {r.release_id: r for r in store.summary(store.resolve(sha)).records}
    record = records[summary.split()[2].rstrip(":")] if summary else None
    assert record is not None, "no summary in the flow run's log"
    assert (record.status, record.method) == ("spent", "dp-mlp")
    # Its summary, in the flow run's log: the release, its ε, the odometer, the MLflow run.
    assert summary.startswith(f"new release {record.release_id}: dp-mlp on "), summary
    assert "ε = 2 at δ = " in summary and "dataset's cumulative ε 2" in summary
    assert "MLflow run " in summary
