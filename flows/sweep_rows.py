"""A sweep's table rows: one per point, trained (:func:`trained_row`) or refused by the
dataset's budget before it trained (:func:`refused_row`). The sweep flow and its private
selection (:mod:`flows.sweep_tuning`) both write them; neither imports the other for it.
"""

from __future__ import annotations

from typing import Any

from tasks.refs import report_of


def trained_row(point: Any, model: dict[str, Any], ev: dict[str, Any], state: str
                ) -> dict[str, Any]:
    """The table's row of a point that trained: its report's privacy, its accuracies, the
    cache state of its training task (``state``) and its model folder."""
    report = report_of(model)
    m = ev["metrics"]
    return {"method": point.method, "config_id": point.config_id, "epsilon": point.epsilon,
            "seed": point.seed,
            "epsilon_spent": report.epsilon if report.private else None,
            "delta": report.delta if report.private else None,
            "level": report.level, "noise_multiplier":
                report.noise_multiplier if report.private else None,
            "val_accuracy": m["val"]["accuracy"], "test_accuracy": m["test"]["accuracy"],
            "private": report.private, "cache": state,
            "artifacts_dir": model["path"], "mlflow_run_id": None,
            "config": dict(point.config), "refused": None}


def refused_row(point: Any, error: BaseException) -> dict[str, Any]:
    """The table's row of a point that the dataset's privacy budget refused before it
    trained anything (over the budget, a non-private point without the override, a release
    that bounds nothing about a protected unit): no accuracy, ``cache = "Refused"`` and the
    reason in ``refused``."""
    return {"method": point.method, "config_id": point.config_id, "epsilon": point.epsilon,
            "seed": point.seed, "epsilon_spent": None, "delta": None, "level": None,
            "noise_multiplier": None, "val_accuracy": None, "test_accuracy": None,
            "private": point.epsilon is not None, "cache": "Refused", "artifacts_dir": None,
            "mlflow_run_id": None, "config": dict(point.config),
            "refused": " ".join(str(error).split())}
