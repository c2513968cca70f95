"""``dpgnn sweep SPEC``: run a sweep spec on Dask, write its table and plots, log it to
MLflow (a parent run, a nested run per point) and print the best configurations.

Everything the spec, the dataset's manifest and the cluster address alone can refuse is
refused before Prefect or Dask starts, one line each.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer


def same_sweep_lock(spec: Any, manifest: dict[str, Any]) -> Any:
    """One sweep of ``spec`` on the dataset at a time in this home (issue 48 §4: the same
    sweep launched twice at once trained and charged every point twice, and the second
    then failed on the first's artifacts): the second waits, then reuses the first's
    cached points (:func:`flows.runlock.same_run_lock`, as `dpgnn run` does)."""
    from dpgnn_core.home import project_dir
    from flows.runlock import lock_path, same_run_lock

    def waiting(holder: str) -> None:
        typer.echo(f"waiting for {holder}, which runs the same sweep on this dataset; its "
                   "points are then reused from the cache (no second charge)", err=True)

    lock = lock_path(project_dir(), str(manifest.get("content_sha256")),
                     {"sweep": spec.model_dump(mode="json")})
    return same_run_lock(lock, waiting)


def sweep_command(
    spec_file: Annotated[Path, typer.Argument(help="A sweep spec (TOML, YAML or JSON).")],
    dask_address: Annotated[str | None, typer.Option(
        help="Run the points on this Dask cluster (tcp://host:8786); default: a "
        "LocalCluster of one single-threaded worker per core.")] = None,
    workers: Annotated[int | None, typer.Option(
        min=1, help="LocalCluster workers (default: one per core).")] = None,
    tracking_uri: Annotated[str | None, typer.Option(
        help="MLflow tracking URI (default: SQLite under the project).")] = None,
    experiment: Annotated[str, typer.Option(help="MLflow experiment.")] = "dpgnn-sweeps",
    refresh: Annotated[bool, typer.Option(
        "--refresh", help="Recompute cached points (private ones are new releases).")
                       ] = False,
    allow_non_private_release: Annotated[bool, typer.Option(
        "--allow-non-private-release",
        help="Let the sweep's non-private points release on a dataset with a privacy "
        "budget, which refuses them otherwise; recorded in the odometer and on MLflow.")
                                         ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")
                       ] = False,
) -> None:
    """Run a sweep: every (method, options, ε, seed) point of SPEC_FILE through the cached
    pipeline tasks on Dask; results table, privacy-utility plot, nested MLflow runs."""
    from dpgnn_core.data.manifest import load_manifest
    from dpgnn_core.environment import check_environment
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir
    from dpgnn_core.methods import preflight
    from dpgnn_core.specs import IngestSpec
    from dpgnn_core.sweeps import load_sweep_spec, points
    from flows import clilog
    from flows.cli.common import (
        check_experiment,
        error,
        server_ready,
        server_watched,
        stdout_to_stderr,
        use_server_if_running,
    )

    try:
        check_experiment(experiment)
        spec = load_sweep_spec(spec_file)
        pts = points(spec)
        clilog.check_home(project_dir())
        check_environment()  # DPGNN_CHECKPOINT_SECONDS, say: one line, before Prefect
        if tracking_uri:
            from tasks.tracking import check_tracking_uri

            check_tracking_uri(tracking_uri)
        if dask_address:
            from flows.sweep import check_cluster

            for note in check_cluster(dask_address)[1]:
                typer.secho(f"warning: {note}", fg=typer.colors.YELLOW, err=True)
        if isinstance(spec.dataset, IngestSpec):  # ingested once into the project
            from flows.sweep import with_dataset_folder

            typer.echo(f"sweep {spec.name}: dataset {spec.dataset.format} "
                       f"{spec.dataset.source or ''}…", err=True)
            spec = with_dataset_folder(spec)
        assert isinstance(spec.dataset, str)
        manifest_path = Path(spec.dataset) / "manifest.json"
        if not manifest_path.is_file():
            raise DpgnnError(f"{spec_file}: dataset {spec.dataset} is not a dataset folder "
                             "(no manifest.json); create one with `dpgnn ingest`")
        manifest = {**load_manifest(manifest_path), "path": spec.dataset}
        notes = list(dict.fromkeys(n for p in pts
                                   for n in preflight.check(p.spec, manifest)))
        from dpgnn_core.sweep_tuning import preflight_private_selection

        preflight_private_selection(spec, pts, int(  # E[K] and its floor, before Prefect
            manifest.get("split_counts", {}).get("train", 0)))
        from flows.cli.sweep_budget import refuse_sweep_over_budget

        refuse_sweep_over_budget(spec, pts, manifest, refresh=refresh,
                                 allow_non_private_release=allow_non_private_release)
    except (DpgnnError, OSError, ValueError) as e:
        error(" ".join(str(e).split()))  # one line (a YAML parser's message spans several)
        raise typer.Exit(2) from e
    for note in notes:
        typer.secho(f"warning: {note}", fg=typer.colors.YELLOW, err=True)
    use_server_if_running()
    from flows.sweep import sweep, task_runner

    server_ready()

    runner = task_runner(dask_address, workers)
    typer.echo(f"sweep {spec.name}: {len(pts)} points on "
               f"{dask_address or 'a local Dask cluster'}…", err=True)
    with same_sweep_lock(spec, manifest), clilog.captured(project_dir()) as log, \
            stdout_to_stderr(), clilog.workers_log_to(None if dask_address else log):
        try:
            with server_watched():
                result = sweep.with_options(task_runner=runner)(
                    sweep_spec=spec, refresh=refresh,
                    allow_non_private_release=allow_non_private_release,
                    tracking_uri=tracking_uri, experiment=experiment)
            paths, logged = result["paths"], result["mlflow"]
        except DpgnnError as e:
            error(f"{e}" + (f" (details: {log})" if log.exists() else ""))
            raise typer.Exit(1) from e
        except KeyboardInterrupt as e:  # Ctrl-C: say what was kept, exit 130 as `run` does
            error("sweep stopped (Ctrl-C): the points that finished are cached (a private "
                  "one is a release and counts against the dataset's budget); no table, "
                  "plot or MLflow parent run was written; the same command resumes, "
                  "reusing the finished points")
            raise typer.Exit(130) from e
    refused = [r for r in result["rows"] if r.get("refused")]
    summary = {"name": spec.name, "points": len(result["rows"]), **paths,
               "best": result["best"], "notes": result.get("notes", []), **logged,
               **({"refused": [{k: r[k] for k in ("method", "config_id", "epsilon", "seed",
                                                  "refused")} for r in refused]}
                  if refused else {})}
    for note in result.get("notes", []):
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        print(json.dumps(_nan_to_none(summary), default=str, allow_nan=False))
        _refused_exit(refused, len(result["rows"]))
        return
    _print_summary(result, paths, logged, experiment)
    _refused_exit(refused, len(result["rows"]))


def _print_summary(result: dict[str, Any], paths: dict[str, str], logged: dict[str, Any],
                   experiment: str) -> None:
    """The sweep's text output: the table, where the results and plots are, and how to
    open the MLflow runs (their link: the runs table, not MLflow's GenAI view)."""
    _print_table(result)
    typer.echo(f"\ntable     {paths['table']} (and .csv; Markdown: {paths['summary']})")
    typer.echo(f"plot      {paths['privacy_utility']}")
    if "hyperparameters" in paths:
        typer.echo(f"plot      {paths['hyperparameters']}")
    if logged.get("mlflow_parent_run_id"):
        from tasks.tracking import open_lines

        typer.echo(f"MLflow    parent run {logged['mlflow_parent_run_id']} in experiment "
                   f"{experiment!r}; open its runs table with:")
        for line in open_lines(logged["mlflow_tracking_uri"],
                               logged["mlflow_experiment_id"]):
            typer.echo(f"  {line}")
    if logged.get("mlflow_error"):
        typer.secho(f"warning: {logged['mlflow_error']}", fg=typer.colors.YELLOW, err=True)


def _refused_exit(refused: list[dict[str, Any]], points: int) -> None:
    """Exit 1 with one line when the privacy budget refused points: the table, the plots
    and MLflow hold the others, and mark these."""
    if not refused:
        return
    from flows.cli.common import error

    which = ", ".join(f"{r['method']} ε={_eps(r['epsilon'])} seed {r['seed']}"
                      for r in refused[:5])
    more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
    error(f"the privacy budget refused {len(refused)} of {points} points ({which}{more}), "
         f"nothing trained for them; the results hold the other points and mark these "
         f"refused. {refused[0]['refused']}")
    raise typer.Exit(1)


def _eps(epsilon: float | None) -> str:
    return "∞" if epsilon is None else f"{epsilon:g}"


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown pipe table, each column as wide as its widest cell (``|`` in a cell
    escaped)."""
    cells = [[c.replace("|", "\\|") for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    return [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *(line(r) for r in cells[1:])]


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def _print_table(result: dict[str, Any]) -> None:
    """The best configuration per (method, ε), chosen on validation: a table sized to the
    terminal on a terminal; piped or redirected (no width to fit, and a box squeezed to 80
    columns cut the configurations short), a Markdown table as wide as its content."""
    from rich.console import Console
    from rich.table import Table

    header = ["method", "ε", "configuration (best on validation)", "val acc",
              "test acc (mean ± std)", "seeds", "configurations"]
    rows = []
    for b in sorted(result["best"], key=lambda b: (b["method"], b["epsilon"] or math.inf)):
        conf = ", ".join(f"{k}={v}" for k, v in sorted(b["config"].items())) or "defaults"
        rows.append([b["method"], "∞" if b["epsilon"] is None else f"{b['epsilon']:g}",
                     conf, f"{b['val_accuracy_mean']:.3f}" + ("*" if "val_score" in b
                                                                else ""),
                     f"{b['test_accuracy_mean']:.3f} ± {b['test_accuracy_std']:.3f}",
                     str(b["seeds"]), str(b["candidates"])])
    for r in result.get("rows", []):
        if r.get("refused"):
            conf = ", ".join(f"{k}={v}" for k, v in sorted(r["config"].items())) or "defaults"
            rows.append([r["method"], _eps(r["epsilon"]), conf, "refused", "(budget)",
                         f"seed {r['seed']}", "-"])
    console = Console()
    if not console.is_terminal:
        typer.echo("\n".join(markdown_table(header, rows)))
    else:
        table = Table(*header, title="sweep results")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    if any("val_score" in b for b in result["best"]):
        typer.echo("* a noisy count of correct validation predictions over the validation "
                   "records (private selection's score, in the tuning ε)")
