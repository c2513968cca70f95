"""Running one spec through the pipeline flow from the command line (``dpgnn run``,
``dpgnn audit``): the checks the spec and the manifest alone can refuse before Prefect
starts (the method's pre-flight, a non-private release or an unbounded unit on a budgeted
dataset), the lock that makes a second identical run wait and reuse, the progress display,
Ctrl-C at a step's end and the one line that says what a stopped run kept.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from flows.cli import common
from flows.cli.common import error, server_watched, stdout_to_stderr
from flows.cli.summary import print_summary


def execute(name: str, spec: Any, dataset: Path, *, tracking_uri: str | None,
             experiment: str, refresh: bool, as_json: bool, explain_graphs: int = 20,
             allow_non_private_release: bool = False,
             auto: dict[str, Any] | None = None,
             cluster: dict[str, Any] | None = None) -> None:
    """Run ``spec`` on ``dataset`` through the pipeline flow and print the summary; checks
    that need only the spec and the dataset's manifest run first, before Prefect starts.
    ``auto``: what ``dpgnn run auto`` chose (the flow records it)."""
    manifest_path = dataset / "manifest.json"
    if not manifest_path.is_file():
        error(f"{dataset} is not a dataset folder (no manifest.json); create one with "
             "`dpgnn ingest`")
        raise typer.Exit(2)
    from dpgnn_core.data.manifest import load_manifest
    from dpgnn_core.environment import check_environment
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir
    from dpgnn_core.methods import preflight
    from flows import clilog

    try:  # what the spec and the manifest alone can refuse, before Prefect starts (the
        # method's pre-flight, which the flow runs too; it imports no torch)
        common.check_experiment(experiment)
        manifest = load_manifest(manifest_path)
        refuse_cluster_mismatch(name, dataset, manifest, cluster or {})
        notes = preflight.check(spec, {**manifest, "path": str(dataset)})
        clilog.check_home(project_dir())
        check_environment()
        refuse_non_private(spec, dataset, manifest, explain_graphs,
                            allow_non_private_release)
        refuse_unbounded(spec, dataset, manifest)
        refuse_spent(spec, manifest)
        refuse_over_plan(spec, manifest, dataset, refresh=refresh)
        if tracking_uri:  # a dead server would otherwise cost minutes of MLflow retries
            from tasks.tracking import check_tracking_uri

            check_tracking_uri(tracking_uri)
    except (DpgnnError, OSError, ValueError) as e:
        error(str(e))
        raise typer.Exit(2) from e
    for note in notes:
        typer.secho(f"warning: {note}", fg=typer.colors.YELLOW, err=True)
    common.use_server_if_running()  # looked up on common: a test may replace it
    from flows.pipeline import pipeline  # imports Prefect, which sets up its logging
    from flows.runlock import lock_path, same_run_lock

    common.server_ready()

    def waiting(holder: str) -> None:
        typer.echo(f"waiting for {holder}, which runs the same spec on this dataset; its "
                   "result is then reused (no second release)", err=True)

    lock = lock_path(project_dir(), str(manifest.get("content_sha256")),
                     spec.model_dump(mode="json"))
    with clilog.captured(project_dir()) as log, same_run_lock(lock, waiting):
        try:  # under the lock: a run of the same spec under way has made its record
            refuse_lost_release(spec, dataset, manifest, refresh)
        except DpgnnError as e:
            error(str(e))
            raise typer.Exit(2) from e
        try:
            summary = run_pipeline(pipeline, name, spec, dataset, tracking_uri=tracking_uri,
                                    experiment=experiment, refresh=refresh,
                                    explain_graphs=explain_graphs,
                                    allow_non_private_release=allow_non_private_release,
                                    **({"auto": auto} if auto else {}),
                                    **({"cluster": cluster} if cluster and any(
                                        cluster.values()) else {}))
        except DpgnnError as e:
            error(f"{e}" + (f" (details: {log})" if log.exists() else ""))
            raise typer.Exit(1) from e
        except OSError as e:  # disk full, read-only, ...: name the path, keep the story
            path = clilog.write_traceback(log, e)
            error(f"cannot write {e.filename or project_dir()}: {e.strerror or e} "
                 f"(details: {path})")
            raise typer.Exit(1) from e
        except KeyboardInterrupt as e:  # Ctrl-C: say what was kept, exit 130
            stopped(e)
            raise typer.Exit(130) from e
    print_summary(summary, as_json)


def refuse_lost_release(spec: Any, dataset: Path, manifest: dict[str, Any],
                        refresh: bool) -> None:
    """Before the flow starts (Prefect's server answering, the same-run lock held): a spec
    already released on the dataset whose cached result this code version does not hold
    (the cache or artifacts moved away, a code upgrade) is refused in one line, as the
    flow would refuse it after starting (issue 48 §4): the check is the flow's own
    (:func:`flows.pipeline.refuse_lost`), on the key Prefect
    would cache the task under, in the result store Prefect resolves (the server may name
    its default storage: why it runs once the server answers). The flow checks again;
    a partitioned dataset's run is checked there only.

    Raises:
        LostReleaseError: naming the release, and ``--refresh`` to spend it again.
    """
    if refresh or getattr(spec, "epsilon", None) is None \
            or manifest.get("layout") == "partitioned":
        return
    from dpgnn_core.methods.registry import method_for
    from tasks.budget import released_plan
    from tasks.ingest import dataset_summary

    released = released_plan({"content_sha256": manifest.get("content_sha256", "")}, spec)
    if released is None:
        return
    from flows.pipeline import refuse_lost

    ds = dataset_summary(str(dataset.resolve()))  # what the flow reads
    refuse_lost(method_for(spec), ds, spec, released)


def refuse_cluster_mismatch(name: str, dataset: Path, manifest: dict[str, Any],
                            cluster: dict[str, Any]) -> None:
    """A partitioned dataset with a method that has no partitioned path, or without a
    cluster; cluster options on a dataset that is not partitioned (one line each,
    :func:`flows.partitioned.check_cluster_options`)."""
    from dpgnn_core.distributed import PARTITIONED_FAMILIES
    from dpgnn_core.errors import DataError
    from dpgnn_core.methods.catalog import entry
    from flows.partitioned import check_cluster_options

    partitioned = manifest.get("layout") == "partitioned"
    if partitioned and entry(name).family not in PARTITIONED_FAMILIES:
        raise DataError(f"{name} does not train from a partitioned dataset yet (the "
                        f"families that do: {', '.join(PARTITIONED_FAMILIES)})",
                        path=dataset / "manifest.json", field="layout", value="partitioned")
    check_cluster_options(cluster, dataset, partitioned)


def stopped(e: KeyboardInterrupt) -> None:
    """The one line of a run stopped by Ctrl-C: what was kept and how to resume."""
    from dpgnn_core.training.checkpoint import Stopped

    if isinstance(e, Stopped) and e.path is not None:
        msg = (f"stopped after step {e.step} of {e.steps}; checkpoint kept at {e.path}: "
               "the same command resumes from it and continues the same release (its budget "
               "reservation stays with the checkpoint: the plan is charged once)")
    elif isinstance(e, Stopped):
        msg = f"stopped after step {e.step} of {e.steps}; nothing kept"
    else:
        msg = ("stopped before training or between steps; nothing half-written is kept "
               "(cached steps and checkpoints of earlier runs stay): the same command "
               "starts again")
    typer.secho(f"stopped: {msg}", fg=typer.colors.RED, err=True)


@contextlib.contextmanager
def stop_at_step_end() -> Iterator[None]:
    """Within the block, the first Ctrl-C asks the training under way to stop at the end of
    its step and keep a checkpoint (:func:`dpgnn_core.training.checkpoint.request_stop`),
    which it raises as ``Stopped``; a second Ctrl-C, or one while no training runs, is a
    ``KeyboardInterrupt`` at once."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from dpgnn_core.training import checkpoint

    asked = [False]

    def on_sigint(signum: int, frame: Any) -> None:
        if not asked[0] and checkpoint.request_stop():
            asked[0] = True
            typer.echo("stopping at the end of this step, keeping a checkpoint (Ctrl-C "
                       "again stops at once)…", err=True)
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def refuse_non_private(spec: Any, dataset: Path, manifest: dict[str, Any],
                        explain_graphs: int, allowed: bool) -> None:
    """Before Prefect starts: a release without privacy (the run, or a private graph
    classifier's non-private twin) on a dataset with a budget, without the override, is
    refused here in seconds (the flow checks again, and records an allowed one:
    :func:`tasks.budget.admit_non_private`)."""
    if allowed:
        return
    from tasks.unaccounted import admit_unaccounted

    ds = {"content_sha256": manifest.get("content_sha256", ""),
          "name": manifest.get("name", dataset.name), "path": str(dataset.resolve())}
    # a private run reading data without noise (--log-raw-loss, ...) is refused too
    admit_unaccounted(ds, str(getattr(spec, "method", "")), spec, allowed=False)
    private = getattr(spec, "epsilon", None) is not None
    twin = private and bool(getattr(spec, "explains", False)) and explain_graphs > 0
    if private and not twin:
        return
    from flows.explain_twin import twin_note
    from tasks.budget import admit_non_private

    method = str(getattr(spec, "method", "")) if not twin else \
        str(getattr(spec, "method", "")).removeprefix("dp-")
    admit_non_private(ds, method, allowed=False, what=twin_note(method) if twin else "")


def refuse_unbounded(spec: Any, dataset: Path, manifest: dict[str, Any]) -> None:
    """Before Prefect starts: a private run whose release bounds nothing about a unit the
    dataset's budget protects (an edge-level run under a budget of nodes) is refused here
    in a second, naming the unit (:func:`tasks.budget.admit_units`; the flow checks
    again)."""
    from dpgnn_core.methods.preflight import release_levels
    from tasks.budget import admit_units

    ds = {"content_sha256": manifest.get("content_sha256", ""),
          "name": manifest.get("name", dataset.name)}
    admit_units(ds, str(getattr(spec, "method", "")), release_levels(spec))


#: The noise multiplier of the probe :func:`refuse_spent` asks the budget about: one
#: Gaussian release at it costs ρ = 1/(2z²) = 5e-25 zCDP, less than any plan a run trains.
PROBE_NOISE = 1e12


def refuse_spent(spec: Any, manifest: dict[str, Any]) -> None:
    """Before Prefect starts: a private run on a dataset whose budget admits no further
    release, not even one of negligible cost (one Gaussian release at noise multiplier
    :data:`PROBE_NOISE` per level the run releases at), is refused here in a second (it
    was refused in the flow, 6-16 s later, after Prefect started). The budget's filter is
    monotone, so a budget that refuses the probe refuses the run's plan too. Skipped while
    a reservation is open (a run resuming from its checkpoint continues that release and
    is charged nothing new); the flow checks the calibrated plan in every case.

    Raises:
        PrivacyError: naming the dataset and ``dpgnn budget show``.
    """
    from dpgnn_core.methods.preflight import release_levels

    levels = release_levels(spec)
    if not levels:
        return
    from dpgnn_core.budget.report import BudgetExceeded
    from dpgnn_core.errors import PrivacyError
    from dpgnn_core.privacy import GaussianEvent, Ledger
    from dpgnn_core.privacy.odometer import Charge
    from tasks.budget import store

    s, sha = store(), str(manifest.get("content_sha256", ""))
    bid = s.budget_id(sha)
    if bid is None or s.has_reserved(bid):
        return
    probe = Ledger()
    for level, relation in levels:  # the pairs the run's own events state
        probe = probe.add(GaussianEvent(noise_multiplier=PROBE_NOISE,
                                        level=level,  # type: ignore[arg-type]
                                        relation=relation))  # type: ignore[arg-type]
    try:
        s.check(sha, Charge(probe))
    except BudgetExceeded as e:
        raise PrivacyError(
            f"the privacy budget of dataset {e.dataset} is spent for unit {e.unit}: it "
            "admits no further private release, however small; nothing was started (see "
            "`dpgnn budget show`)") from e


def refuse_over_plan(spec: Any, manifest: dict[str, Any], dataset: Path | None = None, *,
                     refresh: bool = False) -> None:
    """Before Prefect starts: a private run whose calibrated plan the dataset's budget
    cannot hold is refused here (it was refused inside the flow, 6-16 s later: issue 48
    §5). The plan is the one the fit calibrates
    (:func:`dpgnn_core.methods.early_plan.planned_ledger`, every private family; DP-GNN's
    structure defaults read the edge list of ``dataset``), and the rule is the budget's
    own filter (:meth:`dpgnn_core.budget.BudgetStore.check`, which the flow's gate and
    reservation apply), so the two cannot disagree; the flow checks again in every case.
    Skipped while a reservation is open (a resumed run is charged nothing new), as
    :func:`refuse_spent`, and for a plan already released on this dataset without
    ``refresh`` (the flow reuses its cached result, or refuses a lost one: no new charge).

    Raises:
        BudgetExceeded: the budget's own message (it says that nothing was trained).
    """
    ledger = _early_charge_ledger(spec, manifest, dataset, refresh)
    charge = charge_of(spec, ledger) if ledger is not None else None
    if charge is None:
        return
    from tasks.budget import store

    # BudgetExceeded: "... Nothing was trained. See `dpgnn budget show`."
    store().check(str(manifest.get("content_sha256", "")), charge)


def charge_of(spec: Any, ledger: Any) -> Any:
    """What the flow's gate charges for ``spec``'s planned ``ledger``
    (:meth:`tasks.budget.TaskGate._charge`): the ledger, or ε = ∞ at its one unit with
    insecure reproducible noise (None where that unit is not one)."""
    from dpgnn_core.privacy.odometer import Charge

    levels = {(e.level, e.relation) for e in ledger.events}
    if getattr(spec, "insecure_reproducible_noise", False):  # as the flow's gate charges it
        if len(levels) != 1:
            return None
        ((unit, rel),) = levels
        return Charge(fixed=(float("inf"), 0.0, unit, rel))
    return Charge(ledger)


def _early_charge_ledger(spec: Any, manifest: dict[str, Any], dataset: Path | None,
                         refresh: bool) -> Any:
    """The plan :func:`refuse_over_plan` checks, or None where it checks nothing."""
    if getattr(spec, "epsilon", None) is None:
        return None
    from dpgnn_core.methods.preflight import n_train
    from tasks.budget import released_plan, store

    s, sha = store(), str(manifest.get("content_sha256", ""))
    bid = s.budget_id(sha)
    if bid is None or s.has_reserved(bid):
        return None
    if not refresh and released_plan({"content_sha256": sha}, spec):
        return None
    return remembered_plan(spec, n_train(spec, manifest), structure_of(dataset, manifest),
                           sha)


def structure_of(dataset: Path | None, manifest: dict[str, Any]) -> Any:
    """() ↦ the edge list and N of the dataset folder (what DP-GNN's structure defaults
    read; the early plan calls it only then), or None without a folder."""
    if dataset is None:
        return None

    @functools.cache
    def read() -> tuple[Any, int]:
        from dpgnn_core.data.store import read_edges

        return read_edges(dataset)[0], int(manifest["num_nodes"])
    return read


def remembered_plan(spec: Any, records: int, structure: Any, dataset_sha: str) -> Any:
    """:func:`~dpgnn_core.methods.early_plan.planned_ledger` of ``spec`` on ``records``
    training records (``structure``: the dataset's edge list, for DP-GNN's structure
    defaults), remembered under the project home (``cache/plans/``) per spec, N_train,
    the dataset's content and code version: the calibration (and the accountants it
    imports, about 1 s of CPU) is not redone before a rerun of the same spec (issue 52
    §7). The plan is a function of these alone; it only refuses early, and the flow checks
    its own plan again, so an unreadable file is computed afresh and a write that fails
    is skipped."""
    import hashlib
    import json

    from dpgnn_core.home import project_dir
    from dpgnn_core.io import write_json_atomic
    from dpgnn_core.methods.early_plan import planned_ledger
    from dpgnn_core.privacy import Ledger
    from tasks.config import code_version

    key = hashlib.sha256(json.dumps([spec.model_dump(mode="json"), int(records), dataset_sha,
                                     code_version()], sort_keys=True).encode()).hexdigest()
    path = project_dir() / "cache" / "plans" / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        return Ledger.from_dict(json.loads(path.read_text()))
    ledger = planned_ledger(spec, records, structure)
    if ledger is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, ledger.to_dict())
    return ledger


def run_pipeline(pipeline: Any, name: str, spec: Any, dataset: Path, **kwargs: Any
                  ) -> dict[str, Any]:
    """The pipeline flow with the CLI's progress display around it."""
    from tasks.progress import status  # one live display: the training bars join it

    with status(f"running {name} on {dataset} (Prefect flow)…"), stdout_to_stderr(), \
            stop_at_step_end(), server_watched():
        summary: dict[str, Any] = pipeline(spec=spec, dataset=str(dataset.resolve()),
                                           **kwargs)
    return summary
