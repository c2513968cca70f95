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
            "artifacts_dir": model["path"], "evaluation_dir": ev.get("path"),
            "mlflow_run_id": None, "config": dict(point.config), "refused": None}


def refused_row(point: Any, error: BaseException) -> dict[str, Any]:
    """The table's row of a point that the dataset's privacy budget refused before it
    trained anything (over the budget, a non-private point without the override, a release
    that bounds nothing about a protected unit): no accuracy, ``cache = "Refused"`` and the
    reason in ``refused``."""
    return {"method": point.method, "config_id": point.config_id, "epsilon": point.epsilon,
            "seed": point.seed, "epsilon_spent": None, "delta": None, "level": None,
            "noise_multiplier": None, "val_accuracy": None, "test_accuracy": None,
            "private": point.epsilon is not None, "cache": "Refused", "artifacts_dir": None,
            "evaluation_dir": None, "mlflow_run_id": None, "config": dict(point.config),
            "refused": " ".join(str(error).split())}


def point_times(submitted: list[tuple[Any, Any, Any]], chunk: int = 100
                ) -> dict[str, tuple[int, int]]:
    """Each submitted point's span in ms since the epoch, by
    :func:`tasks.run_page.point_key`: from its training task's start to its evaluation
    task's end, as Prefect's task runs record them (a cached task never runs: its
    completion is both its start and its end). A point whose task runs cannot be read is
    left out (its MLflow run then spans the sweep).

    Args:
        submitted (list): ``(point, train future, evaluate future)``.
        chunk (int, optional): task runs read per request.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterId

    from tasks.run_page import point_key

    ids = [f.task_run_id for _p, tf, ef in submitted for f in (tf, ef)]
    runs: dict[Any, Any] = {}
    try:
        with get_client(sync_client=True) as client:
            for i in range(0, len(ids), chunk):
                runs |= {r.id: r for r in client.read_task_runs(
                    task_run_filter=TaskRunFilter(id=TaskRunFilterId(any_=ids[i:i + chunk])),
                    limit=chunk)}
    except Exception:  # times are a nicety: the runs span the sweep then
        return {}

    def ms(run: Any, attr: str) -> int | None:
        if run is None:  # not (yet) recorded by the server: the run spans the sweep
            return None
        at = getattr(run, attr, None) or (run.state.timestamp if run.state else None)
        return None if at is None else int(at.timestamp() * 1000)

    out: dict[str, tuple[int, int]] = {}
    for p, tf, ef in submitted:
        start = ms(runs.get(tf.task_run_id), "start_time")
        end = ms(runs.get(ef.task_run_id), "end_time")
        if start is not None and end is not None:
            out[point_key({"method": p.method, "config_id": p.config_id,
                           "epsilon": p.epsilon, "seed": p.seed})] = (start, max(start, end))
    return out
