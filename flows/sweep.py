"""Flow ``sweep``: many points (method, options, ε, seed) on one dataset, fanned out on Dask.

Every point is what ``dpgnn run`` runs, cached on its inputs and the code version like a
single run: the pipeline's ``train`` and ``evaluate`` tasks, or for a staged method (GAP,
ProGAP, DPDGC) one task that runs the same cached stages as ``dpgnn run``
(:func:`tasks.staged.staged_point`), so a point equal to an earlier run re-uses its
release. A rerun of the same sweep reuses finished points, a sweep killed half-way resumes
where it stopped, and a point counts as done only once its artifacts are written
(atomically) and intact. The tasks run on a Dask cluster through
Prefect's ``DaskTaskRunner``: a ``distributed.LocalCluster`` of one single-threaded worker
per core by default, or an existing cluster given by address (``dask_address``).

Every task gets the flow's run context (:func:`tasks.config.run_context`: its project home
and code version) and the flow's Prefect result storage, so a worker started elsewhere with
another environment writes artifacts, cache records and budget records into the sweep's
home, and a worker running another code version fails its point with one line
(:func:`tasks.config.in_context`) instead of mixing code versions.

The flow process then writes the results table (Parquet and CSV), the privacy-utility and
hyperparameter plots, and one MLflow parent run with a nested child run per point.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import tasks  # noqa: F401
from prefect import flow

from dpgnn_core.budget import BudgetExceeded
from dpgnn_core.errors import DpgnnError
from dpgnn_core.io import sha256_json
from dpgnn_core.methods.preflight import release_levels
from dpgnn_core.sweeps import (
    SweepSpec,
    best_per_method_and_epsilon,
    duplicate_points,
    markdown_table,
    points,
    selection_note,
)
from flows import server
from flows.sweep_rows import refused_row, trained_row
from flows.sweep_tuning import selections_stopped
from tasks.budget import (
    LostReleaseError,
    NonPrivateRefused,
    UnitNotBounded,
    account_after,
    admit_non_private,
    admit_units,
    odometer,
)
from tasks.unaccounted import admit_unaccounted
from tasks.config import RunContext, code_version, project_dir, run_context
from tasks.evaluate import evaluate
from tasks.ingest import dataset_summary, ensure_ingested
from tasks.refs import ledger_of, report_of
from tasks.train import train
from tasks.heartbeats import install as _install_heartbeats

_install_heartbeats()  # a flow run ends without waiting out its heartbeat thread's second


class ClusterError(DpgnnError, RuntimeError):
    """The Dask cluster given by address does not answer."""


def check_cluster(address: str, timeout: float = 5.0) -> tuple[int, list[str]]:
    """Connect to the Dask scheduler at ``address`` within ``timeout`` seconds.

    Returns:
        tuple: its number of workers, and warnings for the user (workers whose allocator
        setting makes training slow: :data:`NANNY_ENVIRON`).

    Raises:
        ClusterError: it does not answer, or has no worker.
    """
    from distributed import Client

    try:
        with Client(address, timeout=timeout) as client:  # type: ignore[no-untyped-call]
            workers = len(client.scheduler_info().get("workers", {}))
            trims = client.run(_malloc_trim_threshold) if workers else {}
    except (OSError, TimeoutError) as e:
        raise ClusterError(f"the Dask scheduler at {address} does not answer within "
                           f"{timeout:g} s ({type(e).__name__})") from e
    if workers == 0:
        raise ClusterError(f"the Dask scheduler at {address} has no worker")
    slow = sorted(v for v in trims.values() if v is not None)
    notes = [f"{len(slow)} of the {workers} Dask workers at {address} run with "
             f"MALLOC_TRIM_THRESHOLD_={slow[0]} (set by distributed's nanny), which makes "
             "torch training about 2.4x slower; start them with "
             "DASK_CONFIG=deployments/dask-worker.yaml (README, \"Sweeps\")"] if slow else []
    return workers, notes


def _malloc_trim_threshold() -> str | None:
    """The worker's ``MALLOC_TRIM_THRESHOLD_`` (run on each worker by :func:`check_cluster`)."""
    return os.environ.get("MALLOC_TRIM_THRESHOLD_")


#: distributed's nanny exports ``MALLOC_TRIM_THRESHOLD_=65536`` to every worker it spawns
#: (so that freed memory goes back to the OS). Setting any malloc threshold switches off
#: glibc's dynamic mmap threshold, so every tensor above 128 KiB is a fresh mmap/munmap
#: with its page faults: one DP-MLP point of 3000 steps took 12.4-15.8 s in such a worker
#: against 5.2 s in a plain process or in a worker without it (benchmarks/RESULTS.md,
#: "Sweeps on Dask"). ``None`` unsets it (distributed's documented way); workers then keep
#: freed memory in the allocator, as any training process does.
NANNY_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
#: distributed's default for it (distributed.yaml).
NANNY_DEFAULT_TRIM = "65536"


#: Chooses how a sweep's local cluster starts its worker processes: ``forkserver`` (the
#: default where the platform has it) or ``spawn`` (each worker a fresh interpreter that
#: imports everything itself, as before; :func:`worker_start_method`).
START_ENV = "DPGNN_WORKER_START"
START_METHODS = ("forkserver", "spawn")
#: What the forkserver of a sweep's local cluster imports once, before it forks the workers
#: (a spawned worker spends ~12-18 s of CPU on its imports; a forked one inherits these).
#: Third-party modules only, each checked to read no setting of dpgnn, Prefect, MLflow or
#: Dask from the environment at import, to start no thread and not to initialise CUDA.
#: Not ``torch._dynamo`` (~1.4 s of CPU, before any worker forks): training no longer
#: imports it (dpgnn_core/training/eager_optim.py), so DP-MLP, GAP and DPDGC points never
#: need it; a point of a PyTorch Geometric model imports it with PyG. Not pandas, pyarrow,
#: sklearn.metrics or mlflow: importing pyarrow (which pandas imports) starts jemalloc's
#: background thread. Never Prefect, prefect_dask or a dpgnn module that imports them:
#: Prefect builds its settings from the environment when it is imported. First
#: :mod:`dpgnn_core.freeze_at_exit` (the standard library only): the forkserver, which
#: ends when its sweep's process does, skips the garbage collection of its heap (2-2.5 s of
#: CPU after these imports; the forked workers end with ``os._exit`` and run no handler).
FORKSERVER_PRELOAD = ("dpgnn_core.freeze_at_exit", "distributed", "torch", "dp_accounting",
                      "opacus")


def worker_start_method() -> str:
    """The start method of a sweep's local Dask workers: ``DPGNN_WORKER_START``
    (:data:`START_METHODS`), ``forkserver`` by default, ``spawn`` where the platform has no
    forkserver.

    Raises:
        DpgnnError: ``DPGNN_WORKER_START`` is set to another value.
    """
    import multiprocessing

    method = os.environ.get(START_ENV) or "forkserver"
    if method not in START_METHODS:
        raise DpgnnError(f"{START_ENV}={method!r} is not a worker start method (one of "
                         f"{', '.join(START_METHODS)})")
    if method not in multiprocessing.get_all_start_methods():
        return "spawn"
    return method


def local_cluster(start_method: str = "spawn", env: dict[str, str] | None = None,
                  **kwargs: Any) -> Any:
    """A ``distributed.LocalCluster`` (``kwargs``) whose worker processes see this
    process's environment as it is now, the sweep's, with ``env`` on top, and keep the
    allocator's dynamic mmap threshold (:data:`NANNY_ENVIRON`).

    With ``start_method="forkserver"`` its workers are forked from a server process that
    imported :data:`FORKSERVER_PRELOAD` once; it is started by the first worker of this
    process and keeps the environment of that moment, which may be another sweep's (a
    notebook or a test runs several sweeps, each with its own ``--home``). Each worker's
    nanny therefore sets the whole environment of this process (and distributed's
    ``pre-spawn-environ``, applied to this process before the server starts), and the
    worker preload :func:`flows.clilog.dask_setup` unsets what the worker inherited and this
    process does not have (:func:`flows.clilog.adopt_sweep_environ`), before anything of
    Prefect or dpgnn is imported there. A worker the nanny restarts later is spawned.
    """
    import dask
    from distributed import LocalCluster, Nanny
    from distributed.utils import get_mp_context

    from flows.clilog import SWEEP_ENV_NAMES

    class SweepNanny(Nanny):
        def __init__(self, *args: Any, env: dict[str, str] | None = None,
                     **kw: Any) -> None:
            super().__init__(*args, env={**os.environ, **(env or {})},  # type: ignore[misc]
                             **kw)
            # the names the worker keeps: every one its nanny sets
            self.env[SWEEP_ENV_NAMES] = json.dumps(sorted(self.env))

    # A nanny started earlier in this process with distributed's defaults (any LocalCluster
    # of a notebook or a test) exported its value into this process's environment
    # (distributed/nanny.py: os.environ.update(pre_spawn_env)), which a spawned worker, or
    # the forkserver's allocator for all the workers it forks, would inherit.
    if os.environ.get("MALLOC_TRIM_THRESHOLD_") == NANNY_DEFAULT_TRIM:
        del os.environ["MALLOC_TRIM_THRESHOLD_"]
    # Each worker takes the sweep's environment and sends its output to the sweep's log
    # file (flows.clilog.dask_setup). The nannies keep this configuration (a worker they
    # restart too); other clusters of this process keep distributed's.
    preload = list(dict.fromkeys([*dask.config.get("distributed.worker.preload"),
                                  "flows.clilog"]))
    with dask.config.set({**NANNY_ENVIRON, "distributed.worker.preload": preload,
                          "distributed.worker.multiprocessing-method": start_method}):
        if start_method == "forkserver":  # no effect once the server runs
            get_mp_context().set_forkserver_preload(  # type: ignore[no-untyped-call]
                list(FORKSERVER_PRELOAD))
        return LocalCluster(  # type: ignore[no-untyped-call]
            worker_class=SweepNanny, env=env or {}, **kwargs)


def task_runner(dask_address: str | None = None, workers: int | None = None) -> Any:
    """Prefect's ``DaskTaskRunner``: on the cluster at ``dask_address``, or a
    ``LocalCluster`` of ``workers`` single-threaded worker processes (default: one per
    core; started by :func:`local_cluster` when the flow starts, with
    :func:`worker_start_method`)."""
    import logging

    from prefect_dask.task_runners import DaskTaskRunner

    # Dask's INFO records (workers started, nannies closed "by signal 9" at shutdown) are
    # noise to a user; warnings and errors still show. Workers inherit the setting.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
    logging.getLogger("distributed").setLevel(logging.WARNING)
    if dask_address:
        return DaskTaskRunner(address=dask_address)
    n = workers or max(1, len(os.sched_getaffinity(0)))
    return DaskTaskRunner(cluster_class=local_cluster, cluster_kwargs={
        "start_method": worker_start_method(), "n_workers": n, "threads_per_worker": 1,
        "processes": True, "dashboard_address": None,
        "env": {"PREFECT_API_URL": server.api_url_for_workers()}})


def sweep_dir(spec: SweepSpec, dataset_sha: str) -> Path:
    """``$DPGNN_HOME/sweeps/<name>-<hash of spec, dataset, code>``."""
    key = sha256_json({"spec": spec.model_dump(mode="json"), "dataset": dataset_sha,
                       "code": code_version()})
    return project_dir() / "sweeps" / f"{spec.name}-{key[:12]}"


def admitted(ds: Any, pts: list[Any], allow_non_private_release: bool
             ) -> tuple[dict[str, str], list[dict[str, Any]], list[Any]]:
    """Before any point runs: the MLflow tags of allowed non-private releases, the rows of
    the points the dataset's budget refuses outright (a non-private point without the
    override, :func:`~tasks.budget.admit_non_private`; a release that bounds nothing about
    a protected unit, :func:`~tasks.budget.admit_units`), and the points left to run. A
    refused point is marked in the table as an over-budget one is; the others go on."""
    def key(p: Any) -> tuple[Any, ...]:
        return (p.method, p.config_id, p.epsilon, p.seed)

    allowed: dict[str, str] = {}
    refused: dict[Any, BaseException] = {}
    for method in dict.fromkeys(p.method for p in pts  # first, unless allowed (and
                                if getattr(p.spec, "epsilon", None) is None):  # recorded)
        try:
            allowed |= admit_non_private(ds, method, allowed=allow_non_private_release)
        except NonPrivateRefused as e:
            refused |= {key(p): e for p in pts if p.method == method}
    for p in pts:
        if key(p) not in refused:
            try:  # an unaccounted use (--log-raw-loss, ...) is a non-private release too
                allowed |= admit_unaccounted(ds, p.method, p.spec,
                                             allowed=allow_non_private_release)
                admit_units(ds, p.method, release_levels(p.spec))
            except (UnitNotBounded, NonPrivateRefused) as e:
                refused[key(p)] = e
    return (allowed, [refused_row(p, refused[key(p)]) for p in pts if key(p) in refused],
            [p for p in pts if key(p) not in refused])


def for_workers(task_: Any, refresh: bool = False) -> Any:
    """``task_`` with its results stored where this process stores them (Prefect's local
    storage path here, which Prefect resolves to a ``LocalFileSystem`` on the worker; an
    unsaved block would have to be saved to the server first), not where a worker's
    environment would put them; recomputed if ``refresh``."""
    from prefect.settings import get_current_settings

    storage = Path(get_current_settings().results.local_storage_path).resolve()
    return task_.with_options(result_storage=storage, refresh_cache=refresh or None)


def submit_point(p: Any, ds: Any, context: RunContext, refresh: bool, train_t: Any,
                 eval_t: Any) -> tuple[Any, Any, Any]:
    """Submit one point to the flow's task runner: ``(point, model future, evaluation
    future)``. A staged method's point (GAP, ProGAP, DPDGC) is one task,
    :func:`tasks.staged.staged_point`, that runs the stages ``dpgnn run`` runs and then the
    evaluation (both futures are that task); any other, the ``train`` task and the
    ``evaluate`` task on its future (Dask runs evaluate once train is done)."""
    from dpgnn_core.methods.registry import method_for

    if method_for(p.spec).staged:
        from tasks.staged import staged_point

        pf = for_workers(staged_point).submit(dataset=ds, spec=p.spec, context=context,
                                              refresh=refresh)
        return p, pf, pf
    tf = train_t.submit(dataset=ds, spec=p.spec, context=context)
    return p, tf, eval_t.submit(dataset=ds, model=tf, context=context)


def point_outcome(tf: Any, ef: Any) -> tuple[Any, Any, str]:
    """A finished point's model reference, evaluation and cache state: its training
    task's, or for a staged point (:func:`tasks.staged.staged_point`, which checked each
    stage's artifact as ``dpgnn run`` does) its last stage's."""
    if tf is ef:  # a staged point
        out: dict[str, Any] = tf.result()
        return out["model"], out["evaluation"], str(out["states"]["train"])
    return tf.result(), ef.result(), str(tf.state.name)


def rebuilt_if_lost(p: Any, model: Any, ev: Any, state: str, ds: Any, context: RunContext
                    ) -> tuple[Any, Any, str]:
    """A cached ``train`` artifact lost or changed is trained again (and evaluated again),
    unless it is a private release (:class:`~tasks.budget.LostReleaseError`, which stops
    the sweep: remaking it would spend the budget again)."""
    from tasks.cached import intact, lost_release, private_release

    if not intact(model):  # a cached artifact lost or changed
        if private_release(model):  # remaking it would spend the budget again
            raise lost_release(model)
        model = for_workers(train, True).submit(dataset=ds, spec=p.spec,
                                                context=context).result()
        state = "Rebuilt"
    if state == "Rebuilt" or not intact(ev):
        ev = for_workers(evaluate, True).submit(dataset=ds, model=model,
                                                context=context).result()
    return model, ev, state


def with_dataset_folder(spec: SweepSpec) -> SweepSpec:
    """``spec`` with its ``dataset`` a folder: an ingest table is ingested once into the
    project (:func:`tasks.ingest.ensure_ingested`) and replaced by that folder."""
    if isinstance(spec.dataset, str):
        return spec
    return spec.model_copy(update={"dataset": str(ensure_ingested(spec.dataset))})


@flow(name="dpgnn-sweep", persist_result=False, log_prints=False)
def sweep(sweep_spec: SweepSpec, refresh: bool = False,
          allow_non_private_release: bool = False, tracking_uri: str | None = None,
          experiment: str = "dpgnn-sweeps", write: bool = True) -> dict[str, Any]:
    """Run every point of ``sweep_spec`` (on the flow's task runner: see
    :func:`task_runner`), collect the results and, unless ``write`` is off, write the
    results table, the plots and the MLflow runs, as ``dpgnn sweep`` does (the command only
    prints what this returns).

    Args:
        sweep_spec (SweepSpec): the sweep (:class:`dpgnn_core.sweeps.SweepSpec`).
        refresh (bool, optional): recompute cached points (each private one is then a new
            release). Without it a cached private point whose artifacts were lost or
            changed is refused (:class:`~tasks.budget.LostReleaseError`), not retrained.
            (default: :obj:`False`)
        allow_non_private_release (bool, optional): let non-private points release on a
            dataset with a budget, which refuses them otherwise (recorded:
            :func:`tasks.budget.admit_non_private`). (default: :obj:`False`)
        tracking_uri (str, optional): MLflow URI; SQLite under the project by default.
        experiment (str, optional): MLflow experiment. (default: ``dpgnn-sweeps``)
        write (bool, optional): write the table and plots (:func:`write_results`) and log
            the parent and nested MLflow runs (:func:`tasks.tracking.log_sweep`).
            (default: :obj:`True`)

    Returns:
        dict: ``rows`` (one per point), ``best`` (per method and ε, chosen on validation),
        ``dataset`` (its summary) and ``folder`` (where the table and plots go). With
        ``selection = "private"``, each private method's rows are the selected candidates
        only (:mod:`flows.sweep_tuning`) and ``withheld`` holds the others, for the caller
        alone. ``notes``: points listed more than once (run once), and with a private
        selection where its candidates are kept (the curator's only). ``point_times``:
        each point's span (its training's start to its evaluation's end, ms; by
        :func:`tasks.run_page.point_key`), which its MLflow child run spans. With ``write``:
        ``paths`` (the files written, by name) and ``mlflow`` (the parent run's id and
        URI, or ``mlflow_error``).
    """
    import time

    from tasks.tracking import log_sweep

    started_ms = int(time.time() * 1000)  # the parent run spans the sweep (not with a
    # private selection, whose wall time would reveal K: it is logged at its release moment)
    pts = points(sweep_spec)  # distinct points: a repeated seed or grid value runs once
    notes = duplicate_points(sweep_spec)
    sweep_spec = with_dataset_folder(sweep_spec)
    assert isinstance(sweep_spec.dataset, str)
    ds = dataset_summary(sweep_spec.dataset)
    context: RunContext = run_context()  # every task: this home, this code version
    allowed, refused, pts = admitted(ds, pts, allow_non_private_release)
    train_t, eval_t = for_workers(train, refresh), for_workers(evaluate, refresh)
    tuning = None
    held: list[Any] = []  # Ctrl-C before a selection's release gives its record back
    with selections_stopped(held):
        if sweep_spec.selection == "private":  # Papernot & Steinke: flows/sweep_tuning.py
            from flows.sweep_tuning import CURATOR_NOTE, PrivateSelection

            notes.append(CURATOR_NOTE)

            tuning = PrivateSelection.start(sweep_spec, ds, pts, for_workers(train), eval_t,
                                            context, held)
            pts = [p for p in pts if p.epsilon is None]  # the rest run as usual
        submitted = [submit_point(p, ds, context, refresh, train_t, eval_t) for p in pts]
        from prefect.futures import as_completed

        from tasks.progress import Progress

        with Progress(f"sweep {sweep_spec.name}", len(submitted), unit="point") as shown:
            for _ in as_completed([ef for _, _, ef in submitted]):
                shown.advance()  # points done / total, in the order they finish
        rows = list(refused)  # marked in the table; the sweep went on without them
        for p, tf, ef in submitted:
            try:
                model, ev, state = point_outcome(tf, ef)
            except (BudgetExceeded, LostReleaseError) as e:
                # the budget ran out, or the point's plan was released already and its
                # cached result is gone (another code version's cache, a deleted one):
                # refused before any charge; the sweep goes on without it
                rows.append(refused_row(p, e))
                continue
            if tf is not ef:  # a train task's cached artifact may have been lost since
                model, ev, state = rebuilt_if_lost(p, model, ev, state, ds, context)
            rows.append(trained_row(p, model, ev, state))
            report = report_of(model)
            if report.private:  # a cached point re-used its release: recorded, no cost
                account_after(ds, report, p.method, ledger_of(model), reading=False)
        from flows.sweep_rows import point_times

        out: dict[str, Any] = {"point_times": point_times(submitted)}  # each child run's span
        best = best_per_method_and_epsilon([r for r in rows if not r.get("refused")])
        for b in best:
            b["unaccounted"] = ([selection_note(b["candidates"])]
                                if b["epsilon"] is not None and b["candidates"] > 1 else [])
        if tuning is not None:  # only the selected candidates are released
            selected = tuning.finish()
            rows += selected["rows"]
            best += selected["best"]
            out["withheld"] = selected["withheld"]  # the curator's: never written or logged
            out["release_time_ms"] = int(selected["released_at"].timestamp() * 1000)
    out["budget"] = odometer(ds["content_sha256"])  # the dataset's odometer after the sweep
    result = {"rows": rows, "best": best, "dataset": dict(ds),
              "folder": str(sweep_dir(sweep_spec, ds["content_sha256"])), "notes": notes,
              "mlflow_tags": allowed, **out}
    if write:
        result["paths"] = write_results(result, sweep_spec)
        if tuning is not None:  # the files a selection publishes: its release moment
            from flows.sweep_tuning import date_files

            date_files(result["paths"].values(), selected["released_at"])
        result["mlflow"] = log_sweep(result=result, spec=sweep_spec.model_dump(mode="json"),
                                     paths=result["paths"], tracking_uri=tracking_uri,
                                     experiment=experiment, start_time_ms=started_ms,
                                     release_time_ms=result.get("release_time_ms"))
    return result


def write_results(result: dict[str, Any], spec: SweepSpec) -> dict[str, str]:
    """The results table (Parquet and CSV), the spec, the best configurations and the
    plots in the sweep's folder; returns their paths by name."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from dpgnn_core import plots
    from dpgnn_core.io import atomic_file, write_json_atomic

    folder = Path(result["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    rows = [{**r, "config": json.dumps(r["config"], sort_keys=True)} for r in result["rows"]]
    table = pa.Table.from_pylist(rows)
    paths = {"table": str(folder / "results.parquet"), "csv": str(folder / "results.csv"),
             "spec": str(folder / "sweep.json"), "best": str(folder / "best.json")}
    with atomic_file(paths["table"]) as tmp:
        pq.write_table(table, tmp)
    with atomic_file(paths["csv"]) as tmp:
        pacsv.write_csv(table, tmp)
    write_json_atomic(paths["spec"], spec.model_dump(mode="json"))
    write_json_atomic(paths["best"], result["best"])
    paths["summary"] = str(folder / "summary.md")
    with atomic_file(paths["summary"]) as tmp:
        Path(tmp).write_text(markdown_table(result["rows"]))
    done = [r for r in result["rows"] if not r.get("refused")]  # refused: in the table
    paths["privacy_utility"] = str(plots.privacy_utility(
        done, folder / "privacy_utility.png",
        title=f"{spec.name} on {result['dataset']['name']}"))
    hp = plots.hyperparameters(done, folder / "hyperparameters.png")
    if hp is not None:
        paths["hyperparameters"] = str(hp)
    return paths
