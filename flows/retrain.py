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

What a run leaves in its Prefect log (served or under a worker): a completed run, one
paragraph (:func:`summary_line`: the release, its ε, the dataset's cumulative ε of each
protected unit and of the run's own unit, each named, and the budget after it, the MLflow
run); a refused run, the refusal's one line. A refusal is an expected
outcome, not an error of the code: Prefect's records of it (the task's and the pipeline's
failure, each with a traceback, and the engine's re-raise of the Failed state) are dropped
(:class:`QuietRefusals`).
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

import logging
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

#: The loggers of Prefect's flow-run and task-run records (the API's and the terminal's).
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class QuietRefusals(logging.Filter):
    """Drops Prefect's records of a budget refusal, which the retrain flow logs as one line
    itself: a record whose exception is a :class:`~dpgnn_core.budget.BudgetExceeded`, or
    whose message names one (``Task run failed with exception: BudgetExceeded(...)``,
    ``Finished in state Failed('... BudgetExceeded: ...')``) or quotes a refusal the flow
    has seen (``Finished in state Failed('privacy budget of ...')``). The flow's own line
    (marked ``extra={"dpgnn_refusal": True}``) passes, and so does everything else."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "dpgnn_refusal", False):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BudgetExceeded):
            return False
        msg = record.getMessage()
        return BudgetExceeded.__name__ not in msg and not any(t in msg for t in self.seen)


#: One per process, installed by the first retrain run (:func:`quiet_refusals`).
_QUIET = QuietRefusals()


def quiet_refusals() -> QuietRefusals:
    """Install :data:`_QUIET` on Prefect's run loggers (once) and return it."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if _QUIET not in logger.filters:
            logger.addFilter(_QUIET)
    return _QUIET


def summary_line(summary: dict[str, Any], update: dict[str, Any]) -> str:
    """A completed run in one paragraph: the release and its (ε, δ), the dataset's
    cumulative ε and budget after it, the MLflow run, and the folder's update.

    Args:
        summary (dict): the pipeline's run summary (as ``dpgnn run --json``).
        update (dict): the folder's update (``action``, ``reason``).
    """
    from tasks.budget import budget_tags
    from tasks.run_page import cumulative_words

    eps, delta = summary.get("epsilon"), summary.get("delta")
    parts = [f"{summary.get('release')}: {summary.get('method')} on {summary.get('dataset')}"
             + (f", ε = {eps:.4g} at δ = {delta:.3g}" if eps is not None and delta else "")
             + f", unit {summary.get('level')}"]
    odo = budget_tags(summary)
    if odo:  # each figure names its unit: the protected ones, and the run's own
        words = cumulative_words(summary, summary.get("level"), summary.get("relation"))
        parts.append(f"dataset's cumulative ε {words}"
                     + (f" (budget {odo['dpgnn.dataset_budget']})"
                        if "dpgnn.dataset_budget" in odo else " (no budget set)"))
    if summary.get("mlflow_run_id"):
        parts.append(f"MLflow run {summary['mlflow_run_id']} "
                     + (summary.get("mlflow_url")
                        or f"in {summary.get('mlflow_tracking_uri')}"))
    else:
        parts.append(f"not logged to MLflow: {summary.get('mlflow_error')}")
    parts.append(f"dataset {update['action']} ({update['reason']})")
    parts.append(f"test accuracy {summary.get('test_accuracy'):.4g}"
                 if summary.get("test_accuracy") is not None else "")
    return "; ".join(p for p in parts if p)


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
    quiet = quiet_refusals()
    if not str(dataset).strip():  # resolve() would make it the current folder
        msg = ("no dataset folder: set DPGNN_RETRAIN_DATASET before `prefect deploy` or "
               "`python deployments/serve.py`, or give the flow's dataset parameter; "
               "nothing was trained")
        quiet.seen.append(msg[:80])
        log.error("refused: %s", msg, extra={"dpgnn_refusal": True})
        return Failed(message=msg)
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
        quiet.seen.append(str(e)[:80])  # Prefect's "Finished in state Failed('...')"
        log.error("refused: %s", e, extra={"dpgnn_refusal": True})
        # data=e: the engine re-raises the refusal itself, which the filter knows
        return Failed(message=str(e), data=e)
    log.info("%s", summary_line(summary, update))
    return {**summary, "dataset_update": update}


__all__ = ["FLOW_NAME", "QuietRefusals", "is_private", "quiet_refusals", "retrain",
           "summary_line"]
