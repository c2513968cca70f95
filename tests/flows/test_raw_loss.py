"""A private run releases no raw training loss unless asked (``--log-raw-loss``), and a run
that asks is marked: the history, MLflow's ``train_loss`` and the run's tags and summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.slow


def test_private_run_logs_no_raw_loss_unless_flagged(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from dpgnn_core.specs import DpMlpSpec
    from flows.pipeline import pipeline

    write_dataset(csbm(num_nodes=300, seed=43), tmp_path / "ds")
    spec = DpMlpSpec(epsilon=2.0, steps=6, batch_size=40, hidden=8, device="cpu")
    quiet = pipeline(spec=spec, dataset=str(tmp_path / "ds"))
    history = json.loads((Path(quiet["artifacts_dir"]) / "history.json").read_text())
    assert len(history) == 6 and not any("loss" in k for r in history for k in r)
    client = MlflowClient(quiet["mlflow_tracking_uri"])
    assert client.get_metric_history(quiet["mlflow_run_id"], "train_loss") == []
    tags = client.get_run(quiet["mlflow_run_id"]).data.tags
    assert "dpgnn.unaccounted_release" not in tags and quiet["unaccounted_release"] == []
    assert not any("training loss" in u for u in quiet["unaccounted"])

    loud = pipeline(spec=spec.model_copy(update={"log_raw_loss": True}),
                    dataset=str(tmp_path / "ds"))
    history = json.loads((Path(loud["artifacts_dir"]) / "history.json").read_text())
    assert all("train_loss" in r for r in history)
    assert [m.step for m in client.get_metric_history(loud["mlflow_run_id"],
                                                      "train_loss")] == list(range(1, 7))
    tags = client.get_run(loud["mlflow_run_id"]).data.tags
    assert "training loss" in tags["dpgnn.unaccounted_release"]
    assert "**Released outside ε:** training loss" in tags["mlflow.note.content"]
    assert loud["unaccounted_release"] and "log_raw_loss" in loud["unaccounted_release"][0]


def test_log_raw_loss_is_a_flag_of_private_methods_only() -> None:
    from flows.cli import app
    from tests.flows.clirunner import CliRunner

    runner = CliRunner()
    assert "--log-raw-loss" in runner.invoke(app, ["run", "dp-mlp", "--help"]).output
    assert "--log-raw-loss" not in runner.invoke(app, ["run", "gap-inf", "--help"]).output
