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
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir
    from dpgnn_core.methods import preflight
    from dpgnn_core.specs import IngestSpec
    from dpgnn_core.sweeps import load_sweep_spec, points
    from flows import clilog
    from flows.cli import _err, _stdout_to_stderr, _use_server_if_running

    try:
        spec = load_sweep_spec(spec_file)
        pts = points(spec)
        clilog.check_home(project_dir())
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
        manifest = {**json.loads(manifest_path.read_text()), "path": spec.dataset}
        for p in pts:
            preflight.check(p.spec, manifest)
    except (DpgnnError, OSError, ValueError) as e:
        _err(" ".join(str(e).split()))  # one line (a YAML parser's message spans several)
        raise typer.Exit(2) from e
    _use_server_if_running()
    from flows.sweep import sweep, task_runner, write_results
    from tasks.tracking import log_sweep

    runner = task_runner(dask_address, workers)
    typer.echo(f"sweep {spec.name}: {len(pts)} points on "
               f"{dask_address or 'a local Dask cluster'}…", err=True)
    import time

    # The parent run spans the whole sweep, except with a private selection: its wall time
    # grows with the secret number of candidates, so that parent run is logged at release
    # time without it (tasks.tracking.log_sweep).
    started_ms = int(time.time() * 1000)
    with clilog.captured(project_dir()) as log, _stdout_to_stderr():
        try:
            result = sweep.with_options(task_runner=runner)(
                sweep_spec=spec, refresh=refresh,
                allow_non_private_release=allow_non_private_release)
            paths = write_results(result, spec)
            logged = log_sweep(result=result, spec=spec.model_dump(mode="json"),
                               paths=paths, tracking_uri=tracking_uri,
                               experiment=experiment, start_time_ms=started_ms)
        except DpgnnError as e:
            _err(f"{e}" + (f" (details: {log})" if log.exists() else ""))
            raise typer.Exit(1) from e
    summary = {"name": spec.name, "points": len(result["rows"]), **paths,
               "best": result["best"], "notes": result.get("notes", []), **logged}
    for note in result.get("notes", []):
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        print(json.dumps(_nan_to_none(summary), default=str, allow_nan=False))
        return
    _print_table(result)
    typer.echo(f"\ntable     {paths['table']} (and .csv; Markdown: {paths['summary']})")
    typer.echo(f"plot      {paths['privacy_utility']}")
    if "hyperparameters" in paths:
        typer.echo(f"plot      {paths['hyperparameters']}")
    if logged.get("mlflow_parent_run_id"):
        import sys

        mlflow_exe = Path(sys.executable).parent / "mlflow"
        typer.echo(f"MLflow    parent run {logged['mlflow_parent_run_id']} in experiment "
                   f"{experiment!r}; open it with:\n  {mlflow_exe} ui --backend-store-uri "
                   f"{logged['mlflow_tracking_uri']}")
    if logged.get("mlflow_error"):
        typer.secho(f"warning: {logged['mlflow_error']}", fg=typer.colors.YELLOW, err=True)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def _print_table(result: dict[str, Any]) -> None:
    """The best configuration per (method, ε), chosen on validation."""
    from rich.console import Console
    from rich.table import Table

    table = Table("method", "ε", "configuration (best on validation)", "val acc",
                  "test acc (mean ± std)", "seeds", "configurations", title="sweep results")
    for b in sorted(result["best"], key=lambda b: (b["method"], b["epsilon"] or math.inf)):
        conf = ", ".join(f"{k}={v}" for k, v in sorted(b["config"].items())) or "defaults"
        table.add_row(b["method"], "∞" if b["epsilon"] is None else f"{b['epsilon']:g}",
                      conf, f"{b['val_accuracy_mean']:.3f}" + ("*" if "val_score" in b
                                                                 else ""),
                      f"{b['test_accuracy_mean']:.3f} ± {b['test_accuracy_std']:.3f}",
                      str(b["seeds"]), str(b["candidates"]))
    Console().print(table)
    if any("val_score" in b for b in result["best"]):
        typer.echo("* a noisy count of correct validation predictions over the validation "
                   "records (private selection's score, in the tuning ε)")
