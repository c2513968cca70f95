"""Integration: the ``private-retrain`` deployment served against a real Prefect server,
triggered with ``prefect deployment run`` until the dataset's privacy budget is spent.

One scenario: a CSV source ingested with ``dpgnn ingest``; run 1 (served) trains (a new
release, recorded, its summary in its flow run's log); a budget is set that fits exactly two
releases of that calibrated plan; the source changes and run 2 re-ingests it into the same
folder (a new version that shares the folder's budget) and trains; run 3 (served) is refused
before training: its flow run ends Failed with the budget's line, and nothing is recorded or
written. Run 2 is the deployment's flow with the parameters the server holds, run in this
process (a served run is a ~13 s process start; what serving adds, runs 1 and 3 show). The
home's Prefect and MLflow databases start migrated (copies of the session's).

The server is ``dpgnn server start``'s, scheduler on (``scheduling_server``, shared by this
folder's tests); the deployment's daily schedule is set to an hour half a day away, so only
the triggered runs happen here. The served process (``deployments/serve.py``) and the flow
runs it starts are real processes; ``prefect deployment run`` runs in this process, through
Prefect's own command line (a process would cost seconds of imports per run).

``test_a_one_minute_cron_fires_by_itself``: the same deployment served with a one-minute
cron; a run that nobody triggered starts by itself, completes and spends budget. With
SQLAlchemy 2.1.x, Prefect 3.8.8's scheduler failed every minute and created no run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.flows.test_servers import _clean_env as _server_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENT = "dpgnn-retrain/private-retrain"
SPEC = {"method": "dp-mlp", "epsilon": 2.0, "steps": 20, "hidden": 16}
BUDGET_DELTA = 1e-3
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


def _clean_env(home: Path) -> dict[str, str]:
    env = _server_env(home)  # the server tests' environment, quieter
    env.update({"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                "DPGNN_PROGRESS": "off"})
    return env


def _api(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """``path`` on the Prefect API at ``url`` (a POST of ``body`` when given), as JSON.

    Retried on 503, as Prefect's own client does: the server answers 503 when its SQLite
    database is locked by another writer (here: the worker polling, the flow run reporting
    its states), and the request's transaction was rolled back. Seen once in a full `make
    test`, on `create_flow_run`."""
    req = urllib.request.Request(f"{url}{path}", method="POST" if body is not None else "GET",
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    for attempt in range(6):
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code != 503 or attempt == 5:
                raise
            time.sleep(0.5 * 2 ** attempt)


def _write_source(raw: Path, shift: float = 0.0) -> None:
    """A 240-node labelled graph as CSV; ``shift`` changes one feature value."""
    rng = np.random.default_rng(0)
    n, d = 240, 8
    y = np.arange(n) % 4
    x = rng.normal(size=(n, d)) + y[:, None]
    x[0, 0] += shift
    raw.mkdir(exist_ok=True)
    (raw / "nodes.csv").write_text(
        "node_id," + ",".join(f"f{j}" for j in range(d)) + ",label\n"
        + "".join(f"{i}," + ",".join(f"{v:.6f}" for v in x[i]) + f",{y[i]}\n"
                  for i in range(n)))
    src = np.arange(n)
    (raw / "edges.csv").write_text("src,dst\n" + "".join(
        f"{a},{b}\n" for a, b in zip(src, (src + 1) % n, strict=True)))


def _cli(env: dict[str, str], args: list[str]) -> Any:
    """A ``dpgnn`` command that needs no Prefect (``ingest``, ``budget``, ``server stop``),
    in this process on the commands' project home: a subprocess would cost seconds of
    imports."""
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    return CliRunner().invoke(app, ["--home", env["DPGNN_HOME"], *args])


def _run_id(out: str) -> str:
    m = re.search(r"UUID:\s*([0-9a-f-]{36})", out)
    assert m, out
    return m.group(1)


def _prefect(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``prefect ARGS`` in this process (Prefect's command line, on this process's server:
    ``on_server``'s); its output. It fails the test unless the command exits 0. The
    environment and the folder are the caller's."""
    from prefect.cli._app import _app

    capsys.readouterr()
    try:
        _app.meta(args)
    except SystemExit as e:
        assert e.code in (None, 0), capsys.readouterr()
    out, err = capsys.readouterr()
    return out + err


def _delete_deployments(url: str, flow: str, name: str) -> None:
    """Delete the deployment ``flow/name`` (and so its scheduled runs) from the server at
    ``url`` if it has one: the server is shared by this folder's tests, which register the
    same deployment."""
    found = _api(url, "/deployments/filter", {"flows": {"name": {"any_": [flow]}},
                                              "deployments": {"name": {"any_": [name]}}})
    for dep in found:
        req = urllib.request.Request(f"{url}/deployments/{dep['id']}", method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()


def _run_here(url: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The deployment's flow with the parameters the server holds for it, in this process
    on the project ``home`` (its budget, artifacts and MLflow store; Prefect's results and
    cache records in ``home/cache``, as the served runs' environment sets), on the same
    server; the flow run's record, read back from the server. What it does with the
    folder and the budget is what a served run does (the flow's code), without a process
    start (~13 s of CPU): runs 1 and 3 show what serving adds."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings

    from flows.retrain import retrain

    params = _api(url, f"/deployments/name/{DEPLOYMENT}")["parameters"]
    monkeypatch.setenv("DPGNN_HOME", str(home))
    with temporary_settings(updates={PREFECT_LOCAL_STORAGE_PATH: home.resolve() / "cache"}):
        state = retrain(**params, return_state=True)
    return dict(_api(url, f"/flow_runs/{state.state_details.flow_run_id}"))


def _not_during_the_test() -> str:
    """A daily cron (UTC) twelve hours from now: the deployment keeps a schedule, as served
    by default, that fires in no test."""
    from datetime import UTC, datetime

    return f"0 {(datetime.now(UTC).hour + 12) % 24} * * *"


def _registered(url: str, serve: subprocess.Popen[bytes], log: Path) -> dict[str, Any]:
    """The served ``private-retrain`` deployment, once ``serve`` has registered it."""
    flow_name, dep_name = DEPLOYMENT.split("/")
    deadline = time.time() + 120
    while not (found := _api(url, "/deployments/filter", {
            "flows": {"name": {"any_": [flow_name]}},
            "deployments": {"name": {"any_": [dep_name]}}})):
        assert serve.poll() is None, log.read_text()[-3000:]
        assert time.time() < deadline, "the deployment was not registered"
        time.sleep(0.5)
    return dict(found[0])


@pytest.mark.waits
def test_retrain_until_the_budget_is_spent(
        tmp_path: Path, fresh_home: Path, on_server: str,
        seeded_mlflow: Callable[[Path], bool], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dpgnn_core.budget import BudgetExceeded, BudgetStore

    seeded_mlflow(fresh_home)  # the runs' MLflow store, already migrated
    url, env = on_server, _clean_env(fresh_home)
    home, raw, ds = fresh_home, tmp_path / "raw", tmp_path / "ds"
    _write_source(raw)
    source = {"format": "csv", "source": str(raw / "edges.csv"),
              "options": {"nodes": str(raw / "nodes.csv"), "undirected": True}}
    ingest = _cli(env, ["ingest", "-f", "csv", "--source", str(raw / "edges.csv"),
                        "--nodes", str(raw / "nodes.csv"), "--undirected", "--out", str(ds)])
    assert ingest.exit_code == 0, ingest.output
    first = json.loads((ds / "manifest.json").read_text())
    flow_name, dep_name = DEPLOYMENT.split("/")
    _delete_deployments(url, flow_name, dep_name)  # another test's, on this shared server

    api_env = {**env, "PREFECT_API_URL": url}
    serve_log = tmp_path / "serve.log"
    with serve_log.open("wb") as log:  # the child keeps its own descriptor
        serve = subprocess.Popen(
            [sys.executable, "deployments/serve.py", "private-retrain"], cwd=ROOT,
            env={**api_env, "DPGNN_RETRAIN_DATASET": str(ds),
                 "DPGNN_RETRAIN_INGEST": json.dumps(source),
                 "DPGNN_RETRAIN_SPEC": json.dumps(SPEC), "PREFECT_RUNNER_POLL_FREQUENCY": "1",
                 "DPGNN_RETRAIN_CRON": _not_during_the_test()},
            stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)

    def run() -> dict[str, Any]:
        """Trigger the deployment with the CLI; wait for the run's final state."""
        run_id, deadline = _run_id(_prefect(["deployment", "run", DEPLOYMENT], capsys)), \
            time.time() + 240
        while (got := _api(url, f"/flow_runs/{run_id}"))["state_type"] not in FINAL:
            assert serve.poll() is None, serve_log.read_text()[-3000:]
            assert time.time() < deadline, got["state_name"]
            time.sleep(0.5)
        return dict(got)

    try:
        deadline = time.time() + 120
        while not _api(url, "/deployments/filter", {
                "flows": {"name": {"any_": [flow_name]}},
                "deployments": {"name": {"any_": [dep_name]}}}):
            assert serve.poll() is None, serve_log.read_text()[-3000:]
            assert time.time() < deadline, "the deployment was not registered"
            time.sleep(0.5)
        idle = _pipes(serve.pid)  # serving, no run yet
        run1 = run()
        assert run1["state_type"] == "COMPLETED", run1["state"]
        summary1 = _wait_for_log(url, run1["id"], "new release ")
        store = BudgetStore(home / "budget.sqlite")
        (record,) = store.summary(store.resolve(first["content_sha256"])).records
        _write_source(raw, shift=1.0)  # the source changes: the next run re-ingests it
        with ThreadPoolExecutor(1) as pool:  # composing takes seconds: while run 2 runs
            composed = pool.submit(_epsilons, record.charge)
            run2 = _run_here(url, home, monkeypatch)
        assert run2["state_type"] == "COMPLETED", run2["state"]
        # A budget that fits exactly two releases of the plan run 1 was charged for (run 2
        # trained on the new version, which has as many training nodes: the same plan).
        unit, eps = composed.result()
        budget = (eps[1] + eps[2]) / 2
        r = _cli(env, ["budget", "set", str(ds), "--epsilon", repr(budget),
                       "--delta", repr(BUDGET_DELTA)])
        assert r.exit_code == 0, r.output
        model = _models(home)[json.loads((ds / "manifest.json").read_text())["content_sha256"]]
        stamp = (model / "model.pt").stat().st_mtime_ns
        run3 = run()
        _wait_for_runs_to_exit(serve.pid, idle)  # run 3's process and its bookkeeping
        # Ctrl-C stops serving (the terminal sends SIGINT to the foreground group).
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(timeout=120) == 0, serve_log.read_text()[-3000:]
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)  # our serve process's group only
            serve.wait(timeout=60)

    # Each completed run leaves its summary in its flow run's log (read through the API).
    record1 = _budget_records(home, first["content_sha256"])[0]
    assert summary1.startswith(f"new release {record1.release_id}: dp-mlp on "), summary1
    assert "dataset's cumulative ε" in summary1 and "MLflow run " in summary1
    # A refusal is one log line, no traceback; Prefect's own records of it are dropped.
    logs3 = _logs(url, run3["id"])
    refusals = [r for r in logs3 if "privacy budget of dataset" in r["message"]]
    assert [(r["level"], r["message"]) for r in refusals] == [
        (40, f"refused: {run3['state']['message']}")], logs3
    assert not [r for r in logs3 if "Traceback" in r["message"]
                or "BudgetExceeded" in r["message"] or "Engine execution" in r["message"]]
    served = serve_log.read_text()
    assert "Traceback" not in served, served[max(0, served.find("Traceback") - 1500):][:5000]

    # Run 3 does not fit: Failed, with the budget's line as the state's message.
    assert run3["state_type"] == "FAILED", run3["state"]
    expected = BudgetExceeded(f"{first['name']} ({first['content_sha256'][:12]})", unit,
                              eps[1], eps[0], eps[2], budget, BUDGET_DELTA)
    head = str(expected).split(". Nothing was trained")[0]  # then the privacy filter's reason
    assert run3["state"]["message"].startswith(head), run3["state"]["message"]
    assert run3["state"]["message"].endswith("Nothing was trained. See `dpgnn budget show`.")

    # The folder holds the new version, which shares the budget of the first.
    second = json.loads((ds / "manifest.json").read_text())
    assert second["content_sha256"] != first["content_sha256"]
    assert second["ingest"]["source_sha256"] != first["ingest"]["source_sha256"]
    show = _cli(env, ["budget", "show", str(ds), "--json"])
    assert show.exit_code == 0, show.output
    (summary,) = json.loads(show.stdout)["datasets"]
    assert [v["sha256"] for v in summary["versions"]] == [first["content_sha256"],
                                                          second["content_sha256"]]
    # Exactly the two releases that fit: spent, one per version; the refusal left no record.
    records = summary["records"]
    assert [(r["status"], r["method"], r["dataset_sha256"]) for r in records] == [
        ("spent", "dp-mlp", first["content_sha256"]),
        ("spent", "dp-mlp", second["content_sha256"])]
    assert summary["spent"][unit]["epsilon"] == pytest.approx(eps[1])
    assert summary["spent"][unit]["remaining"] == pytest.approx(budget - eps[1])

    # No training for the refused run: one model per version, each the recorded release,
    # and run 2's model file untouched by run 3.
    models = _models(home)
    assert {sha: json.loads((m / "report.json").read_text())["release"]["id"]
            for sha, m in models.items()} == {r["dataset_sha256"]: r["release_id"]
                                              for r in records}
    assert (models[second["content_sha256"]] / "model.pt").stat().st_mtime_ns == stamp


def _budget_records(home: Path, sha256: str) -> list[Any]:
    """The records of the dataset's budget in the project ``home``."""
    from dpgnn_core.budget import BudgetStore

    store = BudgetStore(home / "budget.sqlite")
    return list(store.summary(store.resolve(sha256)).records)


def _logs(url: str, run_id: str) -> list[dict[str, Any]]:
    """The flow run's log records, from the Prefect API."""
    return list(_api(url, "/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}},
                                           "sort": "TIMESTAMP_ASC", "limit": 200}))


def _wait_for_log(url: str, run_id: str, start: str, timeout: float = 60) -> str:
    """The first log message of the flow run that starts with ``start`` (logs arrive in
    batches, after the state)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [r["message"] for r in _logs(url, run_id) if r["message"].startswith(start)]
        if found:
            return str(found[0])
        time.sleep(0.5)
    raise AssertionError(f"no log line starting {start!r}: {_logs(url, run_id)}")


def _pipes(pid: int) -> list[str]:
    """The pipes process ``pid`` holds open (``pipe:[inode]``, from /proc)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("pipe:"):
            held.append(target)
    return sorted(held)


def _wait_for_runs_to_exit(pid: int, idle: list[str]) -> None:
    """Wait until the flow-run processes the serve process ``pid`` started have exited, and
    until it has finished with them: it holds only the pipes it held when ``idle``.

    Why the second wait: Prefect's runner reads the rest of a run's output and closes the
    process (anyio's ``aclose``) after the process has exited; a Ctrl-C that lands in
    that window cancels the runner mid-way (serve.py reports that in one line since:
    tests/deployments/test_deployments.py::test_a_clean_up_failing_after_ctrl_c_is_one_line).
    Ctrl-C here is meant for an idle server; that window is not what this test is about."""
    import psutil

    psutil.wait_procs(psutil.Process(pid).children(recursive=True), timeout=120)
    deadline = time.time() + 60
    while (held := _pipes(pid)) != idle:
        assert time.time() < deadline, (held, idle)
        time.sleep(0.1)


def _epsilons(plan: Any) -> tuple[str, list[float]]:
    """The protected unit of ``plan`` (a recorded release) and the cumulative ε of one, two
    and three releases of it at the budget's δ."""
    from dpgnn_core.budget import compose

    (unit,) = compose([plan], BUDGET_DELTA)
    return unit, [compose([plan] * k, BUDGET_DELTA)[unit].epsilon for k in (1, 2, 3)]


def _models(home: Path) -> dict[str, Path]:
    """The trained model folders of the project, by the sha256 of their dataset."""
    return {json.loads((m / "manifest.json").read_text())["dataset"]: m
            for m in (home / "artifacts" / "train").iterdir()}


@pytest.mark.waits
def test_a_one_minute_cron_fires_by_itself(tmp_path: Path, fresh_home: Path, on_server: str,
                                           seeded_mlflow: Callable[[Path], bool]) -> None:
    """``DPGNN_RETRAIN_CRON='* * * * *' python deployments/serve.py private-retrain`` against
    ``dpgnn server start``: within the next minute the server's scheduler creates a run that
    nobody triggers; the served process runs it; it completes, and its release is charged
    to the dataset's budget. Fails without a working scheduler (SQLAlchemy 2.1.9: no run)."""
    from tests.flows.test_servers import _ingest

    seeded_mlflow(fresh_home)
    url, ds, log = on_server, tmp_path / "ds", tmp_path / "serve.log"
    _ingest(ds, {})
    _delete_deployments(url, *DEPLOYMENT.split("/"))
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [sys.executable, "deployments/serve.py", "private-retrain"], cwd=ROOT,
            env={**_clean_env(fresh_home), "PREFECT_API_URL": url,
                 "DPGNN_RETRAIN_DATASET": str(ds), "DPGNN_RETRAIN_CRON": "* * * * *",
                 "DPGNN_RETRAIN_SPEC": json.dumps({**SPEC, "steps": 10, "hidden": 8}),
                 "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
            stdout=subprocess.DEVNULL, stderr=out, start_new_session=True)
    try:
        dep = _registered(url, serve, log)
        idle = _pipes(serve.pid)
        first = _first_scheduled_run(url, dep["id"], serve, log)
        summary = _wait_for_log(url, first["id"], "new release ")
        _wait_for_runs_to_exit(serve.pid, idle)
        os.killpg(serve.pid, signal.SIGINT)
        assert serve.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)  # our serve process's group only
            serve.wait(timeout=60)
    # Nobody triggered it: the schedule created it, for a whole minute.
    assert first["state_type"] == "COMPLETED", first["state"]
    assert first["auto_scheduled"] is True and first["created_by"]["type"] == "SCHEDULE"
    assert first["expected_start_time"].endswith(":00Z"), first["expected_start_time"]
    # Its release was charged to the dataset's budget.
    sha = json.loads((ds / "manifest.json").read_text())["content_sha256"]
    spent = {r.release_id: r for r in _budget_records(fresh_home, sha)}
    release = summary.split()[2].rstrip(":")
    assert (spent[release].status, spent[release].method) == ("spent", "dp-mlp"), summary


def _first_scheduled_run(url: str, deployment_id: str, runner: subprocess.Popen[bytes],
                         log: Path, timeout: float = 300) -> dict[str, Any]:
    """The deployment's first run to end (the server's scheduler creates them; ``runner``,
    the served process or a worker, runs them), waited for up to ``timeout`` seconds: up
    to a minute for a one-minute cron to come, then the run. ``log`` is the runner's."""
    start = time.time()
    deadline = start + timeout
    while True:
        runs = _api(url, "/flow_runs/filter", {
            "flow_runs": {"deployment_id": {"any_": [deployment_id]}},
            "sort": "EXPECTED_START_TIME_ASC", "limit": 5})
        ended = [r for r in runs if r["state_type"] in FINAL]
        if ended:
            return dict(ended[0])
        assert runner.poll() is None, log.read_text()[-3000:]
        # The scheduler schedules a new or changed deployment within seconds.
        assert runs or time.time() < start + 90, (
            f"the server's scheduler created no run of {DEPLOYMENT} within 90 s")
        assert time.time() < deadline, (
            f"no scheduled run of {DEPLOYMENT} ended within {timeout:g} s; runs: "
            f"{[(r['name'], r['state_name']) for r in runs]}")
        time.sleep(1)
