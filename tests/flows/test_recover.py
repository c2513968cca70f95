"""A flow run whose process was killed is marked Crashed by the next run (flows/recover.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.flows.test_servers import BIN, _clean_env, _ingest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _api(url: str, path: str, body: dict | None = None) -> object:
    req = urllib.request.Request(
        f"{url}{path}", method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, seeded_mlflow):
    """A project home with a dataset, its MLflow database already migrated, and the
    environment of a `dpgnn` command on it. The Prefect server is this process's own
    (``prefect_api_url``), as a `dpgnn server` would be: a server that outlives the killed
    run, which the next run asks."""
    tmp_path = tmp_path_factory.mktemp("recover")
    home = tmp_path / "home"
    seeded_mlflow(home)
    env = _clean_env(home)
    _ingest(tmp_path / "ds", env)
    return home, env, tmp_path / "ds"


def test_killed_run_is_marked_crashed_by_the_next_run(served, prefect_api_url: str,
                                                      dpgnn_here) -> None:
    """A `dpgnn run` killed with SIGKILL while its flow run is RUNNING (a process: the kill
    is real) is marked Crashed by the next run on the home (in this process, on the same
    server)."""
    home, env, ds = served
    url = prefect_api_url
    log = open(home / "victim.log", "w")
    victim = subprocess.Popen([BIN / "dpgnn", "run", "gcn", "--dataset", str(ds), "--epochs",
                               "1000000"], env={**env, "PREFECT_API_URL": url}, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 180
        running: list = []
        while time.time() < deadline and not running:
            assert victim.poll() is None, (home / "victim.log").read_text()[-2000:]
            runs = _api(url, "/flow_runs/filter", {"limit": 10, "flow_runs": {
                "state": {"type": {"any_": ["RUNNING"]}}}})
            assert isinstance(runs, list)
            running = [r for r in runs if (home / "runs" / f"{r['id']}.json").is_file()]
            time.sleep(0.2)
        assert running, "the run never reached RUNNING with its owner recorded"
        run_id = running[0]["id"]
        record = json.loads((home / "runs" / f"{run_id}.json").read_text())
        assert record["pid"] == victim.pid
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
    time.sleep(1)
    left = _api(url, f"/flow_runs/{run_id}")
    assert isinstance(left, dict) and left["state_type"] == "RUNNING"  # what Prefect shows

    r = dpgnn_here(home, ["run", "mlp", "--dataset", str(ds), "--epochs", "2", "--json"])
    assert r.exit_code == 0, r.output[-2000:]
    assert json.loads(r.stdout)["test_accuracy"] is not None

    after = _api(url, f"/flow_runs/{run_id}")
    assert isinstance(after, dict)
    assert after["state_type"] == "CRASHED", after["state"]
    assert "Abandoned" in after["state"]["message"], after["state"]
    assert not (home / "runs" / f"{run_id}.json").exists()
    # Left: the second run's own record (its process, this one, still runs; the next
    # test's mark_abandoned_runs removes it: its run has finished).
    assert len(list((home / "runs").glob("*.json"))) == 1


def test_mark_abandoned_runs_spares_live_owners(served, prefect_api_url: str) -> None:
    """Through the Prefect client: a RUNNING run whose owner lives is left alone, one whose
    owner has ended is marked Crashed, the record of a finished run is removed."""
    home, _env, _ds = served
    url = prefect_api_url
    from prefect import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Completed, Running

    from flows import procs
    from flows.recover import claim_run, mark_abandoned_runs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with temporary_settings(updates={PREFECT_API_URL: url}), \
            get_client(sync_client=True) as client:
        flow_id = client.create_flow(flow=_flow())
        ids = {}
        for name, state in [("alive", Running()), ("dead", Running()), ("done", Completed())]:
            run = client.create_flow_run(flow=_flow(), name=name, state=state)
            assert run.flow_id == flow_id
            ids[name] = str(run.id)
        claim_run(ids["alive"], home=home)  # this test process: alive
        claim_run(ids["done"], home=home)  # alive too, but its run has finished
        path = claim_run(ids["dead"], home=home)
        assert path is not None
        path.write_text(json.dumps({**procs.identity(dead.pid), "flow_run_id": ids["dead"]}))
        assert mark_abandoned_runs(home=home) == [ids["dead"]]
        states = {n: client.read_flow_run(i).state for n, i in ids.items()}
    assert states["alive"] is not None and states["alive"].type.value == "RUNNING"
    assert states["dead"] is not None and states["dead"].type.value == "CRASHED"
    assert states["done"] is not None and states["done"].type.value == "COMPLETED"
    assert sorted(p.stem for p in (home / "runs").glob("*.json")) == [ids["alive"]]
    # An unreachable API is logged, never raised.
    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert mark_abandoned_runs(home=home) == []


def _flow():
    from prefect import flow

    @flow(name="dpgnn-pipeline")
    def stand_in() -> None:  # pragma: no cover - never run, only registered
        pass

    return stand_in
