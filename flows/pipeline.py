"""Flow ``pipeline``: ingest (or an ingested folder) -> train -> evaluate -> log_run.

Every step but ``log_run`` is cached on its inputs and the code version, so a second run
with the same parameters reuses every artifact and only records a new MLflow run.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

from typing import Any

import tasks  # noqa: F401
from prefect import flow, get_run_logger

from dpgnn_core.specs import AnySpec, IngestSpec
from dpgnn_core.methods.preflight import release_levels
from flows.explain_twin import explain_with_twin, plan_twin
from tasks.budget import account_after, admit_non_private, admit_units, released_plan
from tasks.unaccounted import admit_unaccounted
from tasks.cached import refuse_uncached_release
from tasks.cached import run_cached as _run
from tasks.evaluate import evaluate
from tasks.ingest import dataset_summary, ingest
from tasks.refs import ledger_of, report_of
from tasks.run_record import RunOutcome, record_run, run_summary
from tasks.tracking import DEFAULT_EXPERIMENT
from tasks.heartbeats import install as _install_heartbeats

_install_heartbeats()  # a flow run ends without waiting out its heartbeat thread's second



def refuse_lost(method: Any, ds: Any, spec: Any, released: tuple[int, str] | None) -> None:
    """A plan ``released`` before (:func:`tasks.budget.released_plan`) whose first task has
    no cached record for this code version is refused
    (:func:`tasks.cached.refuse_uncached_release`): the ``train`` task's, or a staged
    method's first stage's (:func:`tasks.staged.refuse_lost_stages`; ``run_stages`` checks
    each stage again). The flow checks it before it runs anything; the command line calls
    it too, before the flow starts."""
    if method.staged:
        from tasks.staged import refuse_lost_stages

        refuse_lost_stages(method, ds, spec, released)
        return
    from tasks.train import train

    refuse_uncached_release(train, released, method.name, ds["name"], "training",
                            dataset=ds, spec=spec)


@flow(name="dpgnn-pipeline", persist_result=False, log_prints=False)
def pipeline(
    spec: AnySpec,
    dataset: str | None = None,
    ingest_spec: IngestSpec | None = None,
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
    refresh: bool = False,
    explain_graphs: int = 20,
    allow_non_private_release: bool = False,
    auto: dict[str, Any] | None = None,
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One run: a dataset folder (``dataset``) or an ingest spec, then the method ``spec``
    names (``spec.method``; the registry decides everything else).

    Args:
        spec (AnySpec): any method's spec (:data:`dpgnn_core.specs.AnySpec`), e.g.
            ``DpgnnSpec(method="dp-gcn", epsilon=4)`` or, from a deployment,
            ``{"method": "gcn"}``.
        dataset (str, optional): an ingested dataset folder.
        ingest_spec (IngestSpec, optional): what to ingest when ``dataset`` is not given.
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn``)
        refresh (bool, optional): recompute cached steps. (default: :obj:`False`)
        explain_graphs (int, optional): with a private graph classifier, explain this many
            test graphs with GNNExplainer under the private and the non-private model (the
            latter trained through the same cached path, a non-private release logged as
            its own MLflow run, linked); 0 skips. (default: :obj:`20`)
        allow_non_private_release (bool, optional): let a non-private run (or the private
            graph classifier's non-private twin) release on a dataset with a budget, which
            refuses it otherwise; recorded in the odometer and on the MLflow run
            (:func:`tasks.budget.admit_non_private`). (default: :obj:`False`)
        auto (dict, optional): what ``dpgnn run auto`` chose for ``spec``
            (:class:`dpgnn_core.methods.auto.Choice` as a dict; :func:`auto_pipeline`
            passes it), shown in the summary and on the MLflow run; it must name
            ``spec``'s method.
        cluster (dict, optional): a partitioned dataset's Dask cluster: ``workers`` and
            ``worker_memory`` (a LocalCluster for the run) or ``dask_address``
            (:mod:`flows.partitioned`); the method's partitioned fit runs in one train task
            and evaluates block by block. (default: :obj:`None`)

    Returns:
        dict: the run summary printed by ``dpgnn run --json``.
    """
    import time
    from pathlib import Path

    from dpgnn_core.data.partitioned import is_partitioned
    from dpgnn_core.data.store import read_manifest
    from flows.partitioned import check_cluster_options, evaluation_of, partition_cluster
    from dpgnn_core.methods.registry import method_for
    from flows.recover import recover_and_claim
    from tasks.train import train

    recover_and_claim()  # runs a killed process left RUNNING -> Crashed; record this one's owner
    started_ms = int(time.time() * 1000)  # the MLflow run spans the whole flow
    if (dataset is None) == (ingest_spec is None):
        raise ValueError("pass exactly one of dataset (a folder) or ingest_spec")
    the_method = method_for(spec)  # the one place the method is decided
    if auto is not None and auto.get("method") != the_method.name:
        raise ValueError(f"auto names {auto.get('method')!r}, the spec {the_method.name!r}")
    states: dict[str, str] = {}
    if dataset is not None:
        ds = dataset_summary(dataset)
    else:
        ds, states["ingest"] = _run(ingest, refresh, spec=ingest_spec)
    # the method's pre-flight (the CLI ran it too; a deployment or a Python caller did not)
    manifest = read_manifest(Path(ds["path"]))
    the_method.preflight(spec, {**manifest, "path": ds["path"]})
    partitioned = is_partitioned(manifest)
    check_cluster_options(cluster or {}, Path(ds["path"]), partitioned)
    # A release without privacy on a budgeted dataset is refused (charged ∞) unless allowed,
    # before anything trains; the graph classifier's non-private twin is one too.
    np_tags: dict[str, str] = {}
    if getattr(spec, "epsilon", None) is None:
        np_tags = admit_non_private(ds, the_method.name, allowed=allow_non_private_release)
    else:  # a private run that reads data without noise (--log-raw-loss, ...) is one too
        np_tags = admit_unaccounted(ds, the_method.name, spec,
                                    allowed=allow_non_private_release)
    admit_units(ds, the_method.name, release_levels(spec))  # a unit the run cannot bound
    twin_spec, twin_tags = plan_twin(the_method, spec, ds, explain_graphs,
                                     allowed=allow_non_private_release)
    if partitioned:  # on the cluster, one task: the partitioned fit, evaluated in it
        with partition_cluster(cluster or {}) as address:
            model, states["train"] = _run(train, refresh, dataset=ds, spec=spec,
                                          dask_address=address)
        report = report_of(model)
    elif the_method.staged:  # GAP, ProGAP, DPDGC: the cached stages they declare (calibrate,
        from tasks.staged import run_stages  # graph, modules, aggregations, composition)

        model, report = run_stages(the_method, ds, spec, refresh, states)
    else:
        refuse_lost(the_method, ds, spec, None if refresh else released_plan(ds, spec))
        model, states["train"] = _run(train, refresh, dataset=ds, spec=spec)
        report = report_of(model)  # the core's typed report (JSON on the wire)
    method = report.method or the_method.name
    if partitioned:
        ev, states["evaluate"] = evaluation_of(model), states["train"]
    else:
        ev, states["evaluate"] = _run(evaluate, refresh, dataset=ds, model=model)
    explained: dict[str, Any] = {}
    twin: dict[str, Any] = {}
    if twin_spec is not None and report.private:
        twin, explained = explain_with_twin(ds, model, twin_spec, refresh, states,
                                            count=explain_graphs)
    ledger = ledger_of(model) if report.private else None  # from the task's reference
    # The dataset's odometer: a cached release re-used here is recorded at no cost; the
    # reading after this run goes to the summary and MLflow.
    budget = account_after(ds, report, method, ledger) if report.private else {}
    outcome = RunOutcome(ds=ds, spec=spec, method=method, report=report, ledger=ledger,
                         budget=budget, model=model, ev=ev, states=states,
                         run_tags=the_method.run_tags(spec),
                         extra_metrics=the_method.extra_metrics, non_private_tags=np_tags,
                         twin_spec=twin_spec, twin=twin, twin_tags=twin_tags,
                         explained=explained, auto=auto)
    run, twin_run, mlflow_error = record_run(outcome, tracking_uri, experiment, started_ms)
    if mlflow_error:
        get_run_logger().warning(mlflow_error)
    return run_summary(outcome, run, twin_run, mlflow_error)


def auto_pipeline(request: Any, dataset: str, **kwargs: Any) -> dict[str, Any]:
    """``dpgnn run auto`` from Python: choose the method and recipe for ``request`` (a
    :class:`dpgnn_core.methods.auto.AutoRequest`) from what its level makes public about
    the dataset folder ``dataset``, or from a noisy mean degree charged to its budget
    (:func:`tasks.auto_choice.decide`), then run the :func:`pipeline` flow on the chosen
    spec, the choice recorded; ``kwargs`` are the flow's other parameters."""
    from tasks.auto_choice import decide

    spec, choice = decide(request, dataset)
    summary: dict[str, Any] = pipeline(spec=spec, dataset=dataset, auto=choice.as_dict(),
                                       **kwargs)
    return summary
