"""The retrain flow's own checks (the served deployment: tests/deployments/test_retrain.py)."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from dpgnn_core.budget import BudgetExceeded
from dpgnn_core.specs import DpMlpSpec, TrainSpec
from flows.retrain import QuietRefusals, is_private, quiet_refusals, retrain, summary_line


def test_private_specs_only(tmp_path: Path) -> None:
    assert is_private(DpMlpSpec(method="dp-mlp", epsilon=2))
    assert not is_private(DpMlpSpec(method="dp-mlp"))  # no epsilon: trains without noise
    assert not is_private(TrainSpec(method="gcn"))
    with pytest.raises(ValueError, match="retrains private models: spec 'gcn' is not private"):
        retrain.fn(spec=TrainSpec(method="gcn"), dataset=str(tmp_path))


def _record(msg: str, *args: object, exc: BaseException | None = None,
            **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, msg, args,
                            (type(exc), exc, None) if exc else None)
    rec.__dict__.update(extra)
    return rec


def test_quiet_refusals_drops_prefects_records_of_a_refusal_only() -> None:
    """A refusal leaves one line: the filter drops the task's and the pipeline's failure
    records (with their tracebacks) and the engine's re-raise, keeps the flow's own line and
    every other record (another exception's traceback included)."""
    refusal = BudgetExceeded("csbm (abc)", "node", 2.0, 2.0, 4.0, 3.0, 1e-3)
    quiet = QuietRefusals()
    quiet.seen.append(str(refusal)[:80])
    dropped = [
        _record("Task run failed with exception: %r", refusal, exc=refusal),
        _record("Finished in state Failed('Task run encountered an exception "
                "BudgetExceeded: privacy budget ...')"),
        _record("Encountered exception during execution: %r", refusal),
        _record("Engine execution exited with unexpected exception", exc=refusal),
        _record(f"Finished in state Failed({str(refusal)!r})"),
    ]
    kept = [_record("refused: %s", refusal, dpgnn_refusal=True),
            _record("Engine execution exited with unexpected exception", exc=ValueError("bug")),
            _record("Finished in state Completed()")]
    assert [quiet.filter(r) for r in dropped] == [False] * len(dropped)
    assert [quiet.filter(r) for r in kept] == [True] * len(kept)
    assert quiet_refusals() is quiet_refusals()  # installed once on both run loggers
    for name in ("prefect.flow_runs", "prefect.task_runs"):
        assert logging.getLogger(name).filters.count(quiet_refusals()) == 1


def test_summary_line_names_release_epsilon_odometer_and_mlflow_run() -> None:
    summary = {"release": "new release 0123456789abcdef", "method": "dp-mlp",
               "dataset": "csbm-n200-s0", "epsilon": 1.9999, "delta": 1e-3, "level": "node",
               "dataset_epsilon_spent": 3.5, "dataset_epsilon_delta": 1e-3,
               "dataset_epsilon_by_unit": {"node": 3.5},
               "dataset_budget": {"epsilon": 8.0, "delta": 1e-3, "remaining": {"node": 4.5},
                                  "protected": ["node"]},
               "mlflow_run_id": "r1", "mlflow_tracking_uri": "sqlite:///x/mlflow.db",
               "test_accuracy": 0.5}
    line = summary_line(summary, {"action": "reused", "reason": "unchanged source"})
    assert line.startswith("new release 0123456789abcdef: dp-mlp on csbm-n200-s0, ε = 2 at "
                           "δ = 0.001, unit node; dataset's cumulative ε 3.5 at δ = 0.001 "
                           "for node (protected, this run's unit) (budget ε = 8 at δ = "
                           "0.001; remaining node: 4.5")
    assert "MLflow run r1 in sqlite:///x/mlflow.db" in line
    assert "dataset reused (unchanged source)" in line and "\n" not in line
    failed = summary_line({**summary, "mlflow_run_id": None, "mlflow_error": "MLflow down"},
                          {"action": "given", "reason": "no ingest spec"})
    assert "not logged to MLflow: MLflow down" in failed


def test_summary_line_names_the_unit_and_gives_the_protected_units_figure() -> None:
    """Issue 52 §3: the summary's "dataset's cumulative ε" was the run's own unit's, and
    read "inf" (DP-MLP's unit node, which an earlier node_feature-level release bounds
    nothing about) while the protected unit, node_feature, stood at 12.96 of 16. Each
    figure now names its unit, the protected one first."""
    summary = {"release": "new release 0123456789abcdef", "method": "dp-mlp",
               "dataset": "d", "epsilon": 2.0, "delta": 1e-5, "level": "node",
               "relation": "add_remove", "dataset_epsilon_spent": math.inf,
               "dataset_epsilon_delta": 1e-5,
               "dataset_epsilon_by_unit": {"node": math.inf, "node_feature": 12.96},
               "dataset_budget": {"epsilon": 16.0, "delta": 1e-5,
                                  "remaining": {"node": 0.0, "node_feature": 3.04},
                                  "protected": ["node_feature"],
                                  "filter_used": {"node_feature": 0.8}},
               "mlflow_run_id": "r1", "mlflow_tracking_uri": "sqlite:///x/mlflow.db"}
    line = summary_line(summary, {"action": "given", "reason": "no ingest spec"})
    assert ("dataset's cumulative ε 12.96 at δ = 1e-05 for node_feature (protected), inf "
            "for node (this run's unit) (budget ε = 16 at δ = 1e-05; remaining node: not "
            "protected, node_feature: 3.04 post hoc") in line
    void = summary_line({**summary, "dataset_guarantee_void": "no guarantee since release "
                         "3"}, {"action": "given", "reason": "no ingest spec"})
    assert "dataset's cumulative ε inf at δ = 1e-05 for every unit (VOID: no guarantee" \
        in void and "12.96" not in void
