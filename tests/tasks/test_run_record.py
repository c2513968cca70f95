"""A pipeline run's MLflow record and summary, as pure functions (no Prefect, no server)."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.specs import DpMlpSpec
from tasks.run_record import RunOutcome, record_run, run_summary

DS: Any = {"name": "toy", "path": "/nowhere/toy", "content_sha256": "ab" * 32, "task": "node",
           "num_nodes": 10, "num_edges": 12, "num_classes": 2, "feature_dim": 3}
METRICS = {s: {"accuracy": 0.5, "f1_micro": 0.5, "roc_auc": None} for s in ("val", "test")}


def _outcome(tmp_path: Path, private: bool, **kw: Any) -> RunOutcome:
    report = (PrivacyReport.from_dict({
        "method": "dp-mlp", "private": True, "epsilon": 1.5, "delta": 1e-5,
        "accountant": "pld", "noise_multiplier": 2.0, "steps": 30, "level": "node",
        "relation": "add_remove", "protects": "one node", "randomness": "secret",
        "release": {"id": "r7"}}) if private
        else PrivacyReport(method="mlp", private=False, epsilon=math.inf))
    return RunOutcome(ds=DS, spec=DpMlpSpec(epsilon=1.5 if private else None), method=
                      report.method, report=report, ledger=None,
                      budget={"dataset_epsilon_spent": 1.5} if private else {},
                      model={"path": str(tmp_path / "m")}, ev={"path": str(tmp_path / "e"),
                                                               "metrics": METRICS},
                      states={"train": "Completed"}, **kw)


@pytest.mark.parametrize("private", [True, False])
def test_summary_keys_and_values(tmp_path: Path, private: bool) -> None:
    out = run_summary(_outcome(tmp_path, private), {"run_id": "x1", "tracking_uri": "sqlite:///a"},
                      {}, None)
    assert out["private"] is private and out["test_accuracy"] == 0.5
    assert out["artifacts_dir"] == str(tmp_path / "m") and out["mlflow_run_id"] == "x1"
    if private:
        assert out["epsilon"] == 1.5 and out["release"] == "new release r7"
        assert out["unaccounted"] == [] and out["dataset_epsilon_spent"] == 1.5
        assert out["privacy_report"] == str(tmp_path / "m" / "ledger.json")
    else:
        assert "epsilon" not in out and "release" not in out


def test_extra_metrics_and_a_cached_release(tmp_path: Path) -> None:
    o = _outcome(tmp_path, True, extra_metrics=("roc_auc",))
    o = RunOutcome(**{**o.__dict__, "states": {"train": "Cached"}})
    out = run_summary(o, {"run_id": None, "tracking_uri": "sqlite:///a"}, {}, "boom")
    assert "test_roc_auc" in out and out["mlflow_error"] == "boom"
    assert out["release"] == "reused cached release r7 (no new privacy cost)"


def test_record_run_on_a_dead_tracking_uri_returns_the_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run, twin, error = record_run(_outcome(tmp_path, True), f"http://127.0.0.1:{port}",
                                  "exp", 0)
    assert run["run_id"] is None and twin == {}
    assert error is not None and "rerun" in error and "no new privacy cost" in error
