"""Flow ``retrain``: scheduled private retraining of one dataset folder.

Each run is a new private release, paid for from the dataset's privacy budget
(:mod:`dpgnn_core.budget`):

1. with an ingest spec naming the raw source, the folder is brought up to date first
   (:func:`tasks.ingest.update_dataset`): re-ingested in place, atomically, when the raw
   files changed since the folder's manifest recorded them, else reused. A new version in
   the same folder shares the folder's budget;
2. the pipeline (:func:`flows.pipeline.pipeline`, a subflow) with ``refresh=True``: the
   private training runs again with fresh secret noise (a cached model would be the old
   release, and a scheduled run would train nothing), then evaluation and the MLflow run.

When the budget cannot pay for the calibrated plan, the train task refuses before any
training (:class:`~dpgnn_core.budget.BudgetExceeded`): the flow run ends ``Failed`` with
that refusal's one line as its state message, no model is written and nothing is charged.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

from pathlib import Path
from typing import Any

import tasks  # noqa: F401
from prefect import flow, get_run_logger
from prefect.client.schemas.objects import State
from prefect.states import Failed

from dpgnn_core.budget import BudgetExceeded
from dpgnn_core.specs import AnySpec, IngestSpec
from flows.pipeline import pipeline
from tasks.tracking import DEFAULT_EXPERIMENT

FLOW_NAME = "dpgnn-retrain"


def is_private(spec: Any) -> bool:
    """Whether ``spec`` trains with privacy (a private method with a target ε)."""
    from dpgnn_core.methods.registry import method_for

    return bool(method_for(spec).private and getattr(spec, "epsilon", None) is not None)


@flow(name=FLOW_NAME, persist_result=False, log_prints=False)
def retrain(
    spec: AnySpec,
    dataset: str,
    ingest_spec: IngestSpec | None = None,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> dict[str, Any] | State[Any]:
    """Retrain a private model on the dataset folder ``dataset``: a new release each run.

    Args:
        spec (AnySpec): a private method's spec with a target ε, e.g. ``{"method":
            "dp-mlp", "epsilon": 2}`` (a non-private spec is refused: retraining it would
            reproduce the cached model).
        dataset (str): the dataset folder (``~`` and relative paths are resolved).
        ingest_spec (IngestSpec, optional): the raw source of ``dataset``; given, the
            folder is ingested when missing and re-ingested in place when the source's
            files changed since it was ingested. (default: :obj:`None`: the folder is used
            as it is)
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn``)

    Returns:
        dict: the pipeline's run summary (as ``dpgnn run --json``, with the dataset's
        budget reading) and ``dataset_update`` (``action``: ``ingested``, ``re-ingested``,
        ``reused`` or ``given`` without an ingest spec; ``reason``; ``previous_sha256``).
        When the dataset's budget cannot pay for the run, a ``Failed`` state whose message
        is the :class:`~dpgnn_core.budget.BudgetExceeded` line instead.
    """
    if not is_private(spec):
        raise ValueError(f"{FLOW_NAME} retrains private models: spec {spec.method!r} is not "
                         "private (give a private method and its epsilon)")
    log = get_run_logger()
    folder = str(Path(dataset).expanduser().resolve())
    update: dict[str, Any] = {"action": "given", "reason": "no ingest spec: the folder as it is",
                              "previous_sha256": None}
    if ingest_spec is not None:
        from tasks.ingest import update_dataset

        done = update_dataset(ingest_spec, folder)
        update = {k: done[k] for k in ("action", "reason", "previous_sha256")}
    try:
        summary = pipeline(spec=spec, dataset=folder, tracking_uri=tracking_uri,
                           experiment=experiment, refresh=True)
    except BudgetExceeded as e:  # refused before training: say so in the state itself
        log.error("%s", e)
        return Failed(message=str(e))
    log.info("%s; dataset ε spent %s", summary.get("release"),
             summary.get("dataset_epsilon_spent"))
    return {**summary, "dataset_update": update}


__all__ = ["FLOW_NAME", "is_private", "retrain"]
