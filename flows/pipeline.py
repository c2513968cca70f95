"""Flow ``pipeline``: ingest (or an ingested folder) -> train -> evaluate -> log_run.

Every step but ``log_run`` is cached on its inputs and the code version, so a second run
with the same parameters reuses every artifact and only records a new MLflow run.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

from typing import Any

import tasks  # noqa: F401
from prefect import flow

from dpgnn_core.errors import DataError
from dpgnn_core.specs import IngestSpec, TrainSpec
from tasks.evaluate import artifact_intact, evaluate
from tasks.ingest import dataset_summary, ingest
from tasks.tracking import DEFAULT_EXPERIMENT, log_run


def _intact(result: dict[str, Any]) -> bool:
    """Whether a (cached) step's artifact is still on disk unchanged."""
    if "files" in result:
        return artifact_intact(result["path"], result["files"])
    try:
        return bool(dataset_summary(result["path"])["content_sha256"]
                    == result["content_sha256"])
    except DataError:
        return False


def _run(task_fn: Any, refresh: bool, **kwargs: Any) -> tuple[Any, str]:
    """Run a cached task; if its cached artifact was deleted or changed, run it again."""
    t = task_fn.with_options(refresh_cache=True) if refresh else task_fn
    state = t(return_state=True, **kwargs)
    result = state.result()
    if state.name == "Cached" and not _intact(result):
        state = task_fn.with_options(refresh_cache=True)(return_state=True, **kwargs)
        return state.result(), "Rebuilt"
    return result, state.name


@flow(name="dpgnn-pipeline", persist_result=False, log_prints=False)
def pipeline(
    train_spec: TrainSpec,
    dataset: str | None = None,
    ingest_spec: IngestSpec | None = None,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    refresh: bool = False,
) -> dict[str, Any]:
    """One run: a dataset folder (``dataset``) or an ingest spec, then one method.

    Args:
        train_spec (TrainSpec): method, hyper-parameters, seed.
        dataset (str, optional): an ingested dataset folder.
        ingest_spec (IngestSpec, optional): what to ingest when ``dataset`` is not given.
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn``)
        refresh (bool, optional): recompute cached steps. (default: :obj:`False`)

    Returns:
        dict: the run summary printed by ``dpgnn run --json``.
    """
    from tasks.train import train

    if (dataset is None) == (ingest_spec is None):
        raise ValueError("pass exactly one of dataset (a folder) or ingest_spec")
    states: dict[str, str] = {}
    if dataset is not None:
        ds = dataset_summary(dataset)
    else:
        ds, states["ingest"] = _run(ingest, refresh, spec=ingest_spec)
    model, states["train"] = _run(train, refresh, dataset=ds, spec=train_spec)
    ev, states["evaluate"] = _run(evaluate, refresh, dataset=ds, model=model)
    params = {"method": train_spec.method, "train": train_spec.model_dump(mode="json"),
              "dataset": {"name": ds["name"], "path": ds["path"],
                          "content_sha256": ds["content_sha256"]}}
    from pathlib import Path

    run = log_run(
        run_name=f"{train_spec.method}-{ds['name']}-s{train_spec.seed}",
        params=params,
        history_path=str(Path(model["path"]) / "history.json"),
        metrics=ev["metrics"],
        artifacts=[str(Path(ds["path"]) / "manifest.json"),
                   str(Path(model["path"]) / "manifest.json"),
                   str(Path(model["path"]) / "history.json"),
                   str(Path(ev["path"]) / "metrics.json")],
        tags={"dpgnn.method": train_spec.method, "dpgnn.private": "false",
              "dpgnn.dataset_sha256": ds["content_sha256"]},
        tracking_uri=tracking_uri,
        experiment=experiment,
    )
    m = ev["metrics"]
    return {
        "method": train_spec.method,
        "dataset": ds["name"],
        "dataset_path": ds["path"],
        "seed": train_spec.seed,
        "private": False,
        "test_accuracy": m["test"]["accuracy"],
        "val_accuracy": m["val"]["accuracy"],
        "test_f1_micro": m["test"]["f1_micro"],
        "test_roc_auc": m["test"]["roc_auc"],
        "metrics": m,
        "mlflow_run_id": run["run_id"],
        "mlflow_tracking_uri": run["tracking_uri"],
        "artifacts_dir": model["path"],
        "evaluation_dir": ev["path"],
        "cache": states,
    }
