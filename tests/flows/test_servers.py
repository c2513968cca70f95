"""Integration: a real `prefect server` and a real `mlflow server` on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("prefect")]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["DPGNN_HOME"] = str(home)
    return env


def _ingest(ds: Path, env: dict[str, str]) -> None:
    subprocess.run([BIN / "dpgnn", "ingest", "--format", "synthetic", "--out", str(ds),
                    "-o", "num_nodes=300"], check=True, env=env, capture_output=True)


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_prefect_server_start_run_stop(tmp_path: Path) -> None:
    env = _clean_env(tmp_path / "home")
    port = _free_port()
    _ingest(tmp_path / "ds", env)
    start = subprocess.run([BIN / "dpgnn", "server", "start", "--port", str(port)], env=env,
                           capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stderr[-2000:]
    info = json.loads((tmp_path / "home" / "server.json").read_text())
    try:
        st = subprocess.run([BIN / "dpgnn", "server", "status", "--json"], env=env,
                            capture_output=True, text=True, check=True)
        assert json.loads(st.stdout)["running"] is True
        r = subprocess.run([BIN / "dpgnn", "run", "--method", "mlp", "--dataset",
                            str(tmp_path / "ds"), "--epochs", "3", "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        # The run was recorded by the background server, not an ephemeral one.
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/flow_runs/filter", method="POST",
            data=json.dumps({"limit": 10}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            runs = json.loads(resp.read())
        assert any(run["state_type"] == "COMPLETED" for run in runs), runs
        assert "Starting temporary server" not in r.stderr
    finally:
        stop = subprocess.run([BIN / "dpgnn", "server", "stop"], env=env, capture_output=True,
                              text=True, timeout=60)
    assert "stopped" in stop.stdout
    assert not (tmp_path / "home" / "server.json").exists()
    with pytest.raises(ProcessLookupError):
        os.killpg(info["pgid"], 0)


def test_mlflow_server_receives_run(tmp_path: Path) -> None:
    env = _clean_env(tmp_path / "home")
    port = _free_port()
    _ingest(tmp_path / "ds", env)
    server = subprocess.Popen(
        [BIN / "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow-server.db'}",
         "--artifacts-destination", (tmp_path / "mlflow-artifacts").as_uri(), "--workers", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, "mlflow server exited"
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not become healthy")
        r = subprocess.run([BIN / "dpgnn", "run", "--method", "gcn", "--dataset",
                            str(tmp_path / "ds"), "--epochs", "4", "--tracking-uri", url,
                            "--experiment", "it", "--json"], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert len(r.stdout.strip().splitlines()) == 1, r.stdout
        out = json.loads(r.stdout)
        run = _get(f"{url}/api/2.0/mlflow/runs/get?run_id={out['mlflow_run_id']}")["run"]
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert metrics["test_accuracy"] == pytest.approx(out["test_accuracy"])
        assert run["info"]["status"] == "FINISHED"
        arts = _get(f"{url}/api/2.0/mlflow/artifacts/list?run_id={out['mlflow_run_id']}")
        assert "manifest.json" in {f["path"] for f in arts["files"]}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
