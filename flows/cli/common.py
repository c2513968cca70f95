"""What every ``dpgnn`` command shares: the one-line error, the usage-error group, stdout
kept for dpgnn's own output, the Prefect server and disk watchers, Ctrl-C at a step's end,
and running one spec through the pipeline flow with its pre-flight and summary.

The command modules (:mod:`flows.cli.run`, :mod:`.audit`, :mod:`.sweep`, :mod:`.budget`,
:mod:`.privacy`) and the top-level app (:mod:`flows.cli`) import from here, never from
each other.
"""


from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

# The command-line framework's error classes (typer vendors click: found from typer's own
# BadParameter, whichever click it is built on).
_USAGE_ERROR: Any = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
#: The framework's usage error (raise it with ``ctx=`` for a one-line error naming the
#: command's ``--help``).
USAGE_ERROR: Any = _USAGE_ERROR
_CLICK_ERROR: Any = next(c for c in typer.BadParameter.__mro__
                         if c.__name__ == "ClickException")


class OneLineErrors(TyperGroup):
    """The top-level group: a usage error of the command-line framework (an unknown command
    or option, a bad or missing value) is one ``error:`` line naming it and the ``--help``
    to read, as dpgnn's own errors are, instead of the framework's usage box."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra)
        try:  # not standalone: the framework raises its errors instead of printing them
            rv = super().main(args, prog_name, complete_var, standalone_mode=False,
                              windows_expand_args=windows_expand_args, **extra)
        except _USAGE_ERROR as e:
            where = e.ctx.command_path if e.ctx is not None else "dpgnn"
            if e.format_message().strip():  # (none after a bare group's help)
                error(f"{e.format_message().strip()} (see `{where} --help`)")
            sys.exit(e.exit_code)
        except _CLICK_ERROR as e:
            error(e.format_message())
            sys.exit(e.exit_code)
        except typer.Abort:
            error("aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)  # an Exit's code (0 when none)


def field_help(model: type) -> dict[str, str]:
    """``name -> text`` from the ``Args:`` sections of a spec or option class and its bases
    (the class's own text wins)."""
    import inspect
    import re

    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        doc = inspect.getdoc(cls) or ""
        for m in re.finditer(r"^\s*(\w+) \([^)]*\):\s*(.+?)(?=^\s*\w+ \([^)]*\):|\Z|^\s*$)",
                             doc, flags=re.M | re.S):
            out[m.group(1)] = " ".join(m.group(2).split())
    return out


def pydantic_line(e: dict[str, Any]) -> str:
    """One pydantic error as ``--field VALUE: message``; the union tag (the method name)
    and a whole-spec input are left out."""
    from dpgnn_core.methods.catalog import spec_types as method_specs

    loc = [str(p) for p in e.get("loc", ()) if str(p) not in method_specs()]
    msg = str(e.get("msg", e)).removeprefix("Value error, ")
    if not loc:
        return msg
    return f"--{'.'.join(loc).replace('_', '-')} {e.get('input')!r}: {msg}"


def error(msg: str | Exception) -> None:
    errors = getattr(msg, "errors", None)
    if callable(errors):  # pydantic's ValidationError: keep its messages only
        msg = "; ".join(pydantic_line(e) for e in errors())
    typer.secho(f"error: {msg}", fg=typer.colors.RED, err=True)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Keep stdout for dpgnn's own output: libraries (MLflow's run links, say) that print
    while a command works write to stderr instead, so `--json` prints one object."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def parse_kv(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--option")
        k, v = pair.split("=", 1)
        try:
            out[k.replace("-", "_")] = json.loads(v)
        except json.JSONDecodeError:
            out[k.replace("-", "_")] = v
    return out


def find_datasets(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    cands = [root] + (sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [])
    for p in cands:
        m = p / "manifest.json"
        if m.is_file():
            try:
                found.append((p, json.loads(m.read_text())))
            except json.JSONDecodeError:
                continue
    return found


def use_server_if_running() -> str | None:
    """Before a command starts Prefect (and Dask): end what a killed command left running
    on this home and start this one's watchdog (:func:`flows.reaper.guard`), then point
    Prefect at the background server when it is up."""
    from dpgnn_core.home import project_dir
    from flows import reaper, server

    reaper.guard(project_dir())
    url = server.api_url_if_running()
    if url:
        os.environ["PREFECT_API_URL"] = url
    elif not os.environ.get("PREFECT_API_URL"):
        import tasks  # noqa: F401 - Prefect's environment first

        server.detach_ephemeral()  # a Ctrl-C on the terminal must not end it mid-run
    return url


def json_inf(obj: Any) -> Any:
    """``obj`` with every ±∞ float as the string "inf"/"-inf" (JSON has no ∞; a dataset's
    odometer reads ∞ after an insecure release or one that bounds nothing about a unit)."""
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {k: json_inf(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_inf(v) for v in obj]
    return obj


def structure_defaults_line(chosen: dict[str, Any]) -> str:
    """The values DP-GNN used for the fields its structure rule fills (K, batch, steps,
    lr), each marked ``(given)`` when the spec fixed it, and what the rule read; or, for a
    report that lists its ``fields`` (DPDGC), those options, each level default marked."""
    if chosen.get("fields"):  # a levelled recipe's options (DPDGC): level defaults marked
        chose = set(chosen.get("level_default") or ())
        vals = ", ".join(f"{k} {chosen.get(k)}" + (" (level default)" if k in chose else "")
                         for k in chosen["fields"])
        return f"{vals} [{chosen.get('rule')}]"
    given = set(chosen.get("given") or ())
    vals = ", ".join(f"{k} {chosen.get(k)}" + (" (given)" if k in given else "")
                     for k in ("max_degree", "batch_size", "steps", "lr"))
    stats = chosen.get("stats")
    read = (f"; median degree {stats['median_degree']:g}, mean degree "
            f"{stats['mean_degree']:.3g}, N_train {stats['num_train']}" if stats else "")
    return f"{vals} [{chosen.get('rule')}{read}]"


def print_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(json_inf(summary), allow_nan=False, default=str))
        return
    def fmt(v: Any) -> str:
        return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"
    privacy = (f"epsilon {summary['epsilon']:.4g}, delta {summary['delta']:.3g}"
               if summary.get("private") else "non-private")
    if summary.get("private") and str(summary.get("randomness", "")).startswith("NOT"):
        privacy = f"NOT PRIVATE: reproducible noise; nominal {privacy}"
    typer.echo(f"{summary['method']} on {summary['dataset']} (seed {summary['seed']}): "
               f"test accuracy {fmt(summary['test_accuracy'])}, "
               f"val accuracy {fmt(summary['val_accuracy'])}  [{privacy}]")
    if summary.get("structure_defaults"):
        typer.echo(f"  defaults   {structure_defaults_line(summary['structure_defaults'])}")
    if summary.get("privacy_report"):
        typer.echo(f"  protects   {summary.get('protects')} [level {summary.get('level')}, "
                   f"relation {summary.get('relation')}]")
        typer.echo(f"  noise      {summary.get('randomness')}")
        typer.echo(f"  release    {summary.get('release')}")
        typer.echo(f"  ledger     {summary['privacy_report']}")
        for note in summary.get("unaccounted") or []:
            typer.echo(f"  NOT accounted: {note}")
    if summary.get("mlflow_run_id"):
        typer.echo(f"  MLflow run {summary['mlflow_run_id']} in "
                   f"{summary['mlflow_tracking_uri']}")
    if summary.get("mlflow_error"):
        typer.secho(f"  warning: {summary['mlflow_error']}", fg=typer.colors.YELLOW,
                    err=True)
    typer.echo(f"  artifacts  {summary['artifacts_dir']}")
    typer.echo(f"  cache      {summary['cache']}")


def execute(name: str, spec: Any, dataset: Path, *, tracking_uri: str | None,
             experiment: str, refresh: bool, as_json: bool, explain_graphs: int = 20,
             allow_non_private_release: bool = False) -> None:
    """Run ``spec`` on ``dataset`` through the pipeline flow and print the summary; checks
    that need only the spec and the dataset's manifest run first, before Prefect starts."""
    manifest_path = dataset / "manifest.json"
    if not manifest_path.is_file():
        error(f"{dataset} is not a dataset folder (no manifest.json); create one with "
             "`dpgnn ingest`")
        raise typer.Exit(2)
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.home import project_dir
    from dpgnn_core.methods.catalog import entry
    from flows import clilog

    try:  # what the spec and the manifest alone can refuse, before Prefect starts (the
        # catalogue's preflight, which the flow runs too; it imports no torch)
        manifest = json.loads(manifest_path.read_text())
        notes = entry(spec.method).preflight(spec, {**manifest, "path": str(dataset)})
        clilog.check_home(project_dir())
        refuse_non_private(spec, dataset, manifest, explain_graphs,
                            allow_non_private_release)
        refuse_unbounded(spec, dataset, manifest)
        if tracking_uri:  # a dead server would otherwise cost minutes of MLflow retries
            from tasks.tracking import check_tracking_uri

            check_tracking_uri(tracking_uri)
    except (DpgnnError, OSError, ValueError) as e:
        error(str(e))
        raise typer.Exit(2) from e
    for note in notes:
        typer.secho(f"warning: {note}", fg=typer.colors.YELLOW, err=True)
    use_server_if_running()
    from flows.pipeline import pipeline  # imports Prefect, which sets up its logging
    from flows.runlock import lock_path, same_run_lock

    def waiting(holder: str) -> None:
        typer.echo(f"waiting for {holder}, which runs the same spec on this dataset; its "
                   "result is then reused (no second release)", err=True)

    lock = lock_path(project_dir(), str(manifest.get("content_sha256")),
                     spec.model_dump(mode="json"))
    with clilog.captured(project_dir()) as log, same_run_lock(lock, waiting):
        try:
            summary = run_pipeline(pipeline, name, spec, dataset, tracking_uri=tracking_uri,
                                    experiment=experiment, refresh=refresh,
                                    explain_graphs=explain_graphs,
                                    allow_non_private_release=allow_non_private_release)
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


def give_up(why: str) -> None:
    """End the command at once with one ``error:`` line (called from a watcher thread)."""
    error(f"{why}; the run stops here. Nothing half-written is kept (every artifact is "
         "written atomically): rerun the same command once fixed (finished steps are "
         "reused, training resumes from its last checkpoint)")
    sys.stderr.flush()
    os._exit(1)  # the flow's own end would wait minutes on a dead API or a full disk


@contextlib.contextmanager
def server_watched() -> Iterator[None]:
    """Within the block, a Prefect server that ends mid-run, or a project home whose disk
    fills up, ends the command within a second with one ``error:`` line (exit 1), instead
    of minutes of Prefect's retries and a bare ``ConnectError`` or thousands of lines of
    database tracebacks. Artifacts are written atomically and checkpoints stay, so nothing
    half-written is kept and a rerun reuses the finished steps."""
    from dpgnn_core.home import project_dir
    from flows import clilog, server

    with server.watched(give_up), clilog.disk_watched(project_dir(), give_up):
        yield


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
    private = getattr(spec, "epsilon", None) is not None
    twin = private and bool(getattr(spec, "explains", False)) and explain_graphs > 0
    if private and not twin:
        return
    from tasks.budget import admit_non_private

    ds = {"content_sha256": manifest.get("content_sha256", ""),
          "name": manifest.get("name", dataset.name), "path": str(dataset.resolve())}
    method = str(getattr(spec, "method", "")) if not twin else \
        str(getattr(spec, "method", "")).removeprefix("dp-")
    admit_non_private(ds, method, allowed=False, what="" if not twin else
                      f"the GNNExplainer comparison trains {method}, a non-private twin of "
                      "this model, on the same training graphs (--explain-graphs 0 skips it)")


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


def run_pipeline(pipeline: Any, name: str, spec: Any, dataset: Path, **kwargs: Any
                  ) -> dict[str, Any]:
    """The pipeline flow with the CLI's progress display around it."""
    from tasks.progress import status  # one live display: the training bars join it

    with status(f"running {name} on {dataset} (Prefect flow)…"), stdout_to_stderr(), \
            stop_at_step_end(), server_watched():
        summary: dict[str, Any] = pipeline(spec=spec, dataset=str(dataset.resolve()),
                                           **kwargs)
    return summary


