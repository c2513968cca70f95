"""A sweep's child runs on MLflow (issue 52 §3): a private selection's released model states
the tuning ε everywhere a user reads "this model's ε" (not its candidate's own training ε),
and every child is a run as a single run is: the documented name, the artifacts, its own
start and end."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpgnn_core.data.store import write_dataset
from dpgnn_core.data.synthetic import csbm

pytestmark = pytest.mark.slow  # MLflow's SQLite store, as the other log_sweep tests

#: The selection's tuning ε, above the candidate's own training ε (as issue 52's 8 / 4.774).
TUNING_EPS = 7.9995


def _trained(tmp_path: Path, steps: int = 4) -> tuple[Path, Any, dict[str, Any]]:
    """A dataset folder and a small DP-MLP trained on it, written as the train task writes
    a model folder (report.json with its release, ledger.json, history.json,
    manifest.json) and an evaluation folder (metrics.json)."""
    from dpgnn_core.methods.registry import get

    ds = tmp_path / "ds"
    write_dataset(csbm(num_nodes=120, seed=3), ds)
    method = get("dp-mlp")
    spec = method.spec(epsilon=4.774, steps=steps, batch_size=32, hidden=8, device="cpu")
    fitted = method.fit(csbm(num_nodes=120, seed=3), spec)
    report = fitted.report.with_release({"id": "3f2a9c01b7de4a5b", "created": "x"})
    mdir = tmp_path / "model"
    mdir.mkdir()
    (mdir / "report.json").write_text(json.dumps(report.to_dict()))
    (mdir / "ledger.json").write_text(json.dumps(fitted.ledger.to_dict()))
    (mdir / "history.json").write_text(json.dumps(fitted.history))
    (mdir / "manifest.json").write_text(json.dumps({"spec": spec.model_dump(mode="json")}))
    edir = tmp_path / "evaluation"
    edir.mkdir()
    (edir / "metrics.json").write_text(json.dumps({
        "val": {"accuracy": 0.61, "f1_micro": 0.61}, "test": {"accuracy": 0.58}}))
    return ds, report, {"ledger": fitted.ledger}


def _result(ds: Path, tmp_path: Path, report: Any, epsilon: float) -> dict[str, Any]:
    row = {"method": "dp-mlp", "config_id": "dp-mlp[steps=4]", "epsilon": epsilon,
           "seed": 77, "epsilon_spent": report.epsilon, "delta": report.delta,
           "level": "node", "noise_multiplier": report.noise_multiplier,
           "val_accuracy": 0.61, "test_accuracy": 0.58, "private": True,
           "cache": "Completed", "artifacts_dir": str(tmp_path / "model"),
           "evaluation_dir": str(tmp_path / "evaluation"), "mlflow_run_id": None,
           "config": {"steps": 4}, "refused": None}
    return {"rows": [row], "best": [], "budget": {},
            "dataset": {"name": "d", "path": str(ds), "content_sha256": "0" * 64}}


def _child(logged: dict[str, Any]) -> tuple[Any, Any]:
    from mlflow.tracking import MlflowClient

    assert "mlflow_error" not in logged, logged
    client = MlflowClient(logged["mlflow_tracking_uri"])
    (child,) = [r for r in client.search_runs([logged["mlflow_experiment_id"]])
                if r.data.tags.get("mlflow.parentRunId") == logged["mlflow_parent_run_id"]]
    return client, child


def test_the_selected_model_page_states_the_tuning_epsilon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        seeded_mlflow: Callable[[Path], bool]) -> None:
    """Issue 52 §3: the released model's description, ``dpgnn.epsilon`` tag and
    ``privacy.epsilon`` param said the candidate's own ε (4.774); the released model has
    the tuning guarantee (ε = 8). Its report.json and ledger.json on the page are the
    released ones, and nothing logged states the candidate's ε."""
    from dpgnn_core.privacy.events import GaussianEvent
    from dpgnn_core.sweep_tuning import SCORE_EVENT
    from tasks.tracking import log_sweep

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    ds, report, fit = _trained(tmp_path)
    assert report.epsilon < 4.8  # the candidate's own training ε
    score = GaussianEvent(level="node", relation="add_remove", noise_multiplier=9.0,
                          description=SCORE_EVENT)
    ledger = fit["ledger"].add(score)
    result = _result(ds, tmp_path, report, epsilon=8.0)
    result["rows"][0] |= {"epsilon_spent": TUNING_EPS, "val_accuracy": 0.6034}
    result["best"] = [{"method": "dp-mlp", "config_id": "dp-mlp[steps=4]", "epsilon": 8.0,
                       "selection": "private", "epsilon_spent": TUNING_EPS,
                       "delta": report.delta, "ledger": ledger.to_dict(),
                       "report": "selected by private hyperparameter tuning (Papernot & "
                                 f"Steinke 2022), tuning epsilon = {TUNING_EPS}",
                       "tuning": {"epsilon": TUNING_EPS, "target_epsilon": 8.0},
                       "unaccounted": ["the tuning bound covers what the candidates' "
                                       "ledgers cover"]}]
    seeded_mlflow(tmp_path)
    at = 1_700_000_000_000
    logged = log_sweep(result=result, paths={}, spec={"name": "s", "selection": "private"},
                       tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                       release_time_ms=at)
    client, child = _child(logged)
    tags, params = child.data.tags, child.data.params
    assert tags["dpgnn.epsilon"] == f"{TUNING_EPS:.4g}" == "8"
    assert params["privacy.epsilon"] == str(TUNING_EPS)
    assert params["privacy.target_epsilon"] == "8.0"
    assert params["privacy.accountant"] == "rdp"
    assert params["privacy.event2.description"] == SCORE_EVENT  # the noisy score's event
    note = tags["mlflow.note.content"]
    assert note.startswith(f"**(ε = {TUNING_EPS:.4g}, δ = ")
    assert "**Private selection:** selected by private hyperparameter tuning" in note
    assert child.data.metrics["epsilon_spent"] == TUNING_EPS
    own = f"{report.epsilon:.4g}"  # the candidate's ε: on no figure of the page
    assert own not in json.dumps([tags, params, child.data.metrics])
    # the documented name, with the sweep's target ε, the unit, the seed and the release
    assert child.info.run_name == "dp-mlp-d-eps8-node-s77-3f2a9c01b7de"
    # artifacts: the released report and ledger; not the candidate's own training files
    names = {a.path for a in client.list_artifacts(child.info.run_id)}
    assert names == {"manifest.json", "report.json", "ledger.json"}
    local = Path(client.download_artifacts(child.info.run_id, "report.json", str(tmp_path)))
    released = json.loads(local.read_text())
    assert released["epsilon"] == TUNING_EPS and released["target_epsilon"] == 8.0
    assert released["epsilon_by_step"] == []
    local = Path(client.download_artifacts(child.info.run_id, "ledger.json", str(tmp_path)))
    logged_ledger = json.loads(local.read_text())
    assert logged_ledger["epsilon"] == TUNING_EPS
    assert logged_ledger["entries"][-1]["event"]["description"] == SCORE_EVENT
    assert child.info.start_time == child.info.end_time == at  # the release moment


def test_a_sweep_child_is_a_run_as_a_single_run_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        seeded_mlflow: Callable[[Path], bool]) -> None:
    """Issue 52 §3: children had no artifacts, lasted the 0.8 s of their logging and were
    named ``METHOD-epsEPS-sSEED``. Now: a single run's name, its artifacts (manifests,
    history, evaluation metrics, ledger, report), its per-step history and final
    metrics, and the point's own span (its training's start to its evaluation's end)."""
    from tasks.run_page import point_key
    from tasks.tracking import log_sweep

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    ds, report, _fit = _trained(tmp_path)
    result = _result(ds, tmp_path, report, epsilon=4.774)
    span = (1_700_000_000_000, 1_700_000_042_500)  # 42.5 s of training and evaluation
    result["point_times"] = {point_key(result["rows"][0]): span}
    seeded_mlflow(tmp_path)
    logged = log_sweep(result=result, paths={}, spec={"name": "s", "selection": "flagged"},
                       tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
                       start_time_ms=span[0] - 60_000)
    client, child = _child(logged)
    assert (child.info.start_time, child.info.end_time) == span
    assert child.info.run_name == "dp-mlp-d-eps4.77-node-s77-3f2a9c01b7de"
    names = {a.path for a in client.list_artifacts(child.info.run_id)}
    assert names == {"manifest.json", "history.json", "ledger.json", "report.json",
                     "metrics.json"}
    assert child.data.metrics["val_f1_micro"] == 0.61
    curve = client.get_metric_history(child.info.run_id, "epsilon_spent")
    assert [m.step for m in curve] == [1, 2, 3, 4]
    assert curve[-1].value == pytest.approx(report.epsilon)
    assert child.data.params["dataset.content_sha256"] == "0" * 64
    assert child.data.tags["dpgnn.epsilon"] == f"{report.epsilon:.4g}"
