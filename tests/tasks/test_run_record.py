"""A pipeline run's MLflow record and summary, as pure functions (no Prefect, no server)."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any, ClassVar

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


# --- the ledger read as typed events (a new event kind needs no change here) --------------


def test_a_new_clipped_event_kind_keeps_its_clip_and_summary(monkeypatch: Any) -> None:
    """privacy_params reads the events' own properties (``clips_gradients``, ``rate``,
    ``repetitions``): an event kind added to the catalogue of kinds, unknown to
    tasks/run_record.py, still gets its clip norm, rate and steps in MLflow's params."""
    from dataclasses import dataclass

    from dpgnn_core.privacy import events
    from dpgnn_core.privacy.events import Ledger, PrivacyEvent
    from tasks.run_record import privacy_params

    @dataclass(frozen=True)
    class ShuffledGaussianEvent(PrivacyEvent):
        kind: ClassVar[str] = "test_shuffled_gaussian"
        clips_gradients: ClassVar[bool] = True
        noise_multiplier: float = 1.0
        sampling_rate: float = 0.1
        steps: int = 1

    monkeypatch.setitem(events.EVENT_TYPES, ShuffledGaussianEvent.kind, ShuffledGaussianEvent)
    ledger = Ledger().add(ShuffledGaussianEvent(noise_multiplier=1.3, sampling_rate=0.25,
                                                steps=7, level="node", description="new"))
    report = PrivacyReport.from_dict({"method": "x", "private": True, "epsilon": 1.0,
                                      "delta": 1e-5, "noise_multiplier": 1.3})
    got = privacy_params(report, ledger, {"clip": 0.5})
    assert got["clip"] == 0.5 and got["sampling_rate"] == 0.25
    assert got["event1"] == {"description": "new", "kind": "test_shuffled_gaussian",
                             "noise_multiplier": 1.3, "sampling": "none",
                             "sampling_rate": 0.25, "steps": 7, "level": "node",
                             "relation": "add_remove"}
    # the same kind without clipping: no clip norm is claimed
    monkeypatch.setattr(ShuffledGaussianEvent, "clips_gradients", False)
    assert "clip" not in privacy_params(report, ledger, {"clip": 0.5})


@pytest.mark.parametrize("kind", ["gaussian", "poisson_gaussian", "uniform_gaussian", "dpgnn"])
def test_every_event_kind_states_its_rate_and_repetitions(kind: str) -> None:
    """Each known kind answers ``rate`` and ``repetitions`` from its own fields (DP-GNN's
    rate is m / N of the subgraphs drawn without replacement)."""
    from dpgnn_core.privacy.events import EVENT_TYPES

    cls = EVENT_TYPES[kind]
    kw: dict[str, Any] = {"noise_multiplier": 2.0}
    if kind == "dpgnn":
        kw.update(num_train=40, batch_size=10, steps=3)
    elif kind == "gaussian":
        kw.update(count=3)
    else:
        kw.update(sampling_rate=0.25, steps=3)
    ev = cls(**kw)
    assert ev.repetitions == 3
    assert ev.rate == (None if kind == "gaussian" else 0.25)
    assert ev.clips_gradients is (kind != "gaussian")
