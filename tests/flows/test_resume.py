"""A killed `dpgnn run` resumes from its checkpoint on the rerun: the release says so, every
step of the plan is in the history once, and the ledger counts the plan's steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

BIN = Path(sys.executable).parent / "dpgnn"


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(tmp_path: Path, prefect_api_url: str,
                                                seeded_mlflow: Callable[[Path], bool],
                                                dpgnn_here: Callable[..., Any]) -> None:
    write_dataset(csbm(num_nodes=600, seed=4), tmp_path / "ds")
    home = tmp_path / "home"
    seeded_mlflow(home)  # its MLflow store already migrated
    # Long enough to be killed mid-training with one compute thread (~6 s at ~3 ms a step on
    # this 2-core box; the kill comes within a second, once a checkpoint is written), and no
    # longer: the rerun trains the rest.
    steps = 2000
    args = [str(BIN), "--home", str(home), "run", "dp-mlp", "--epsilon", "4", "--steps",
            str(steps), "--batch-size", "32", "--hidden", "8", "--device", "cpu",
            "--dataset", str(tmp_path / "ds"), "--json"]
    env = {**os.environ, "DPGNN_CHECKPOINT_SECONDS": "0.5", "DPGNN_PROGRESS": "off",
           "PREFECT_API_URL": prefect_api_url}
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        ckpts: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None and not ckpts:
            time.sleep(0.1)
            ckpts = list((home / "checkpoints").glob("train/*/checkpoint.pt"))
        assert ckpts, "no checkpoint appeared (did the run finish or fail first?)"
        time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
    # The same command again, in this process (it needs no process of its own: the kill
    # was the first's), on the same Prefect server.
    r = dpgnn_here(home, args[3:], {k: env[k] for k in ("DPGNN_CHECKPOINT_SECONDS",
                                                         "DPGNN_PROGRESS")})
    assert r.exit_code == 0, r.output[-3000:]
    summary = json.loads(r.stdout)
    assert summary["cache"]["train"] != "Cached", "the first run finished training first"
    report = json.loads((Path(summary["artifacts_dir"]) / "report.json").read_text())
    (resumed,) = report["release"]["resumed_from_step"]
    assert 0 < resumed < steps
    history = json.loads((Path(summary["artifacts_dir"]) / "history.json").read_text())
    assert [rec["step"] for rec in history] == list(range(1, steps + 1))
    ledger = json.loads((Path(summary["artifacts_dir"]) / "ledger.json").read_text())
    assert sum(e["event"]["steps"] for e in ledger["entries"]) == steps
    assert not list((home / "checkpoints").glob("train/*/checkpoint.pt"))  # cleared
