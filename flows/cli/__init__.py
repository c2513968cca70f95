"""The ``dpgnn`` command line.

Heavy modules (torch, Prefect, MLflow, pyarrow) are imported inside the commands that need
them, so ``dpgnn --help`` and ``dpgnn datasets`` answer at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli.common import (
    OneLineErrors,
    console,
    error,
    find_datasets,
    give_up,
)
from flows.warm_env import THREAD_VARIABLES, one_thread_unless_set  # noqa: F401 - re-exported

app = typer.Typer(
    cls=OneLineErrors,
    name="dpgnn",
    help="Train graph neural networks with differential privacy: ingest a graph, run a "
    "method, browse results in MLflow.\n\nProject state (datasets, artifacts, caches, the "
    "MLflow store) lives in ./.dpgnn unless --home or DPGNN_HOME says otherwise.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
server_app = typer.Typer(help="A local Prefect server that keeps `dpgnn run` fast.",
                         no_args_is_help=True)
app.add_typer(server_app, name="server")


def _privacy_app() -> typer.Typer:
    from flows.cli.privacy import app as privacy_app

    return privacy_app


app.add_typer(_privacy_app(), name="privacy")


def _budget_app() -> typer.Typer:
    from flows.cli.budget import app as budget_app

    return budget_app


app.add_typer(_budget_app(), name="budget")


@app.callback()
def main_options(
    home: Annotated[str | None, typer.Option(
        help="Project directory (datasets, artifacts, caches, MLflow store); an empty one "
        "is refused.", envvar="DPGNN_HOME", show_default=False)] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show full logs and tracebacks on the terminal (else "
        "they go to a log file under the home, named in the error line).")] = False,
) -> None:
    from dpgnn_core.home import HOME_ENV, HomeError, check_home_text

    try:  # DPGNN_HOME= (click reads an empty variable as unset) or --home '': one line
        if home is not None:
            os.environ[HOME_ENV] = str(Path(check_home_text(home, "--home")).resolve())
        elif HOME_ENV in os.environ:
            check_home_text(os.environ[HOME_ENV])
    except HomeError as e:
        error(str(e))
        raise typer.Exit(2) from e
    if verbose:
        os.environ["DPGNN_VERBOSE"] = "1"


def _ingest_command() -> Any:
    from flows.cli.ingest import ingest_command

    return ingest_command()


app.command("ingest", help="Ingest raw data into a dataset folder (Parquet + manifest), "
            "atomically.")(_ingest_command())


@app.command("export-dgl")
def export_dgl(
    artifacts: Annotated[Path, typer.Argument(
        help="A GAP run's artifacts folder (`artifacts_dir` of `dpgnn run gap-* --json`).")],
    out: Annotated[Path, typer.Option(help="DGL graph file to write (dgl.save_graphs).")],
) -> None:
    """Write a run's released node data as a DGL graph file (needs the dgl extra).

    GAP's release is its private aggregations X(1..K): the file holds one graph with them as
    node data (`agg` [n, K, d], `agg_1` ... `agg_K`) and no edges, since the edges are what
    GAP protects. Other methods release only their weights (model.pt).
    """
    import torch

    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.interop.dgl import save_release_dgl
    from tasks.evaluate import verify_files

    manifest_path = artifacts / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text())
        agg = manifest.get("aggregations")
        if not isinstance(agg, dict):
            error(f"{artifacts} holds no released node data: only GAP runs release node data "
                 "(their private aggregations); other methods release their weights "
                 "(model.pt)")
            raise typer.Exit(2)
        verify_files(agg["path"], agg["files"])
        xs = torch.load(Path(agg["path"]) / "aggregations.pt", weights_only=True)
        save_release_dgl(out, xs)
    except (DpgnnError, OSError, ValueError, KeyError) as e:
        error(f"cannot export {artifacts}: {e}")
        raise typer.Exit(1) from e
    typer.echo(f"wrote {out}: {xs.shape[0]} nodes, X(1..{xs.shape[1]}) of width "
               f"{xs.shape[2]} as node data 'agg', no edges (GAP's private release)")


@app.command()
def datasets(
    root: Annotated[Path | None, typer.Argument(
        help="A dataset folder or a folder of them (default: ./data, where the README "
        "puts them, and $DPGNN_HOME/datasets).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """List ingested datasets with their counts; a folder a run would refuse (its
    manifest edited or from before manifest_sha256, a file missing or resized) is marked
    and warned about."""
    from dpgnn_core.data.manifest import quick_problem
    from dpgnn_core.home import project_dir

    roots = [root] if root is not None else [Path("data"), project_dir() / "datasets"]
    found = [d for r in roots for d in find_datasets(r)]
    root = root or Path(" and ".join(str(r) for r in roots))
    problems = {p: quick_problem(p, m) for p, m in found}
    for p, problem in problems.items():
        if problem:
            typer.secho(f"warning: {p}: {problem}; a run refuses it", fg=typer.colors.YELLOW,
                        err=True)
    from flows.cli.budget import SAME_GRAPH, same_graph_elsewhere

    same = same_graph_elsewhere(found)  # issue 48 §3: a budget per content, made visible
    for p, others in same.items():
        typer.secho(f"note: {p}: {SAME_GRAPH}: {'; '.join(others)}",
                    fg=typer.colors.YELLOW, err=True)
    if as_json:
        for p, m in found:
            print(json.dumps({"path": str(p), **{k: m.get(k) for k in (
                "name", "task", "num_nodes", "num_edges", "num_graphs", "feature_dim",
                "num_classes", "split_counts", "content_sha256")},
                **({"problem": problems[p]} if problems[p] else {}),
                **({"same_graph": same[p]} if p in same else {})}))
        return
    if not found:
        typer.echo(f"no datasets under {root}")
        return
    _print_datasets(found, problems)


def _print_datasets(found: list[tuple[Path, dict[str, Any]]],
                    problems: dict[Path, str | None]) -> None:
    """The datasets as a table sized to the terminal on a terminal; piped or redirected (no
    width to fit: a box squeezed to 80 columns cuts names and paths), a Markdown table as
    wide as its content."""
    from rich.console import Console
    from rich.table import Table

    from flows.cli.sweep import markdown_table

    header = ["name", "task", "nodes", "edges", "graphs", "features", "classes",
              "train/val/test", "path"]
    rows = []
    for p, m in found:
        s = m.get("split_counts", {})
        rows.append([str(m.get("name", "?")) + (" (refused)" if problems[p] else ""),
                     str(m.get("task", "?")), f"{m.get('num_nodes', 0):,}",
                     f"{m.get('num_edges', 0):,}", str(m.get("num_graphs", 0)),
                     str(m.get("feature_dim")), str(m.get("num_classes")),
                     f"{s.get('train')}/{s.get('val')}/{s.get('test')}", str(p)])
    console = Console()
    if not console.is_terminal:
        typer.echo("\n".join(markdown_table(header, rows)))
        return
    table = Table(*header)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _run_app() -> typer.Typer:
    from flows.cli.run import run_app

    return run_app


app.add_typer(_run_app(), name="run")


def _audit_app() -> typer.Typer:
    from flows.cli.audit import audit_app

    return audit_app


app.add_typer(_audit_app(), name="audit")


def _sweep_command() -> Any:
    from flows.cli.sweep import sweep_command

    return sweep_command


app.command("sweep", help="Run a sweep: every (method, options, ε, seed) point of "
            "SPEC_FILE through the cached pipeline tasks on Dask; results table, "
            "privacy-utility plot, nested MLflow runs.")(_sweep_command())


@app.command(help="The main job on the embedded dataset: a small private sweep (DP-GCN, "
             "GAP-EDP and DP-MLP at three ε, with the non-private GCN and MLP as references) "
             "on a local Dask cluster; prints the table, the privacy-utility plot and how to "
             "open MLflow on it.")
def demo(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    workers: Annotated[int | None, typer.Option(
        min=1, help="Dask workers (default: one per core).")] = None,
) -> None:
    """The main job on the embedded dataset: a small private sweep (DP-GCN, GAP-EDP and
    DP-MLP at three ε, with the non-private GCN and MLP as references) on a local Dask
    cluster; prints the table, the privacy-utility plot and how to open MLflow on it."""
    from dpgnn_core.data.ingest import ingest as ingest_dataset
    from dpgnn_core.home import project_dir
    from dpgnn_core.specs import DEMO_INGEST
    from dpgnn_core.sweeps import DEMO_SWEEP, SweepSpec
    from flows import clilog

    home = project_dir()
    try:
        clilog.check_home(home)
    except OSError as e:
        error(str(e))
        raise typer.Exit(2) from e
    folder = home / "datasets" / str(DEMO_INGEST.name)
    if not (folder / "manifest.json").is_file():  # the embedded graph, generated once
        with console().status("generating the embedded demo graph…"):
            ingest_dataset(DEMO_INGEST, folder, overwrite=True)
    spec_file = home / "demo-sweep.json"
    spec_file.write_text(SweepSpec(**{**DEMO_SWEEP, "dataset": str(folder)})
                         .model_dump_json(indent=2))
    from flows.cli.sweep import sweep_command

    sweep_command(spec_file, dask_address=None, workers=workers, tracking_uri=None,
                  experiment="dpgnn-demo", refresh=False, as_json=as_json)


@server_app.command("start")
def server_start(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port on 127.0.0.1, 1-65535.")
               ] = 4242,
    database_url: Annotated[str | None, typer.Option(
        "--database-url", envvar="DPGNN_SERVER_DATABASE_URL", show_envvar=True,
        help="Prefect's database, e.g. a team's PostgreSQL: "
             "postgresql+asyncpg://USER:PASSWORD@HOST:5432/prefect (checked before the "
             "server starts). Default: SQLite under the project.")] = None,
) -> None:
    """Start the background Prefect server (SQLite under the project, or --database-url)."""
    from dpgnn_core.errors import ServerError
    from flows import server

    try:
        with console().status("starting Prefect server (first start migrates its DB)…"):
            info = server.start(port=port, database_url=database_url)
    except ServerError as e:
        error(str(e))
        raise typer.Exit(1) from e
    on = f" on {info['database']}" if info.get("database") else ""
    typer.echo(f"Prefect server running at {info['url']}{on} (pid {info['pid']}); `dpgnn "
               "run` uses it while it is up")
    if info.get("warm"):
        typer.echo(f"warm runner pid {info['warm']['pid']}: `dpgnn run` and `dpgnn audit` "
                   "start from it once its imports are done (`dpgnn server status`)")


@server_app.command("stop")
def server_stop() -> None:
    """Stop the background Prefect server."""
    from flows import server

    typer.echo(server.stop_server().message)


@server_app.command("status")
def server_status(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Say whether the background Prefect server (and its warm runner) is up."""
    from dpgnn_core.home import project_dir
    from flows import server, warm_state

    st = server.status()
    warm = warm_state.status(project_dir())
    if as_json:
        print(json.dumps({**st, "warm": warm}))
    elif st["running"]:
        on = f" on {st['database']}" if st.get("database") else ""
        typer.echo(f"running at {st['url']}{on} (pid {st['pid']})")
    else:
        typer.echo("not running")
    if warm["running"] and not as_json:
        typer.echo(f"warm runner pid {warm['pid']}: " + (
            "serving `dpgnn run` and `dpgnn audit`" if warm["ready"] else "importing"))


# THREAD_VARIABLES, one_thread_unless_set (imported above from flows.warm_env, whose
# client sets them before it decides where a command runs): the compute threads of a
# ``dpgnn`` process and its children unless the environment sets them: one. A small
# model's steps are too short to share between cores, and on a busy machine torch's
# default of one OpenMP thread per core spins: GAP-EDP's 64-row Adam steps on Cora took
# ~96 ms each with 2 threads on 2 busy cores against ~5 ms CPU with one
# (benchmarks/RESULTS.md, "The README tour"). ``OMP_NUM_THREADS=2 dpgnn ...`` gives a
# large-batch run on an idle machine its cores back.

#: The width of ``--help`` piped or redirected (no terminal to fit): rich fell back to 80
#: columns and cut option names (``--insecure-reproducib…``).
PIPED_HELP_WIDTH = 120


@contextlib.contextmanager
def wide_help_when_piped() -> Iterator[None]:
    """Within the block, render help :data:`PIPED_HELP_WIDTH` columns wide when standard
    output is no terminal, unless ``COLUMNS`` or ``TERMINAL_WIDTH`` sets a width (the
    framework's width is restored after it: a command run in-process leaves none)."""
    import typer.rich_utils

    before = typer.rich_utils.MAX_WIDTH
    if not (sys.stdout.isatty() or os.environ.get("COLUMNS")
            or os.environ.get("TERMINAL_WIDTH")):
        typer.rich_utils.MAX_WIDTH = PIPED_HELP_WIDTH
    try:
        yield
    finally:
        typer.rich_utils.MAX_WIDTH = before


def main() -> None:
    one_thread_unless_set()
    # The earlier form `dpgnn run --method NAME ...` stays as an alias of `dpgnn run NAME`.
    args = sys.argv[1:]
    if "run" in args:
        i = args.index("run")
        if args[i + 1:i + 2] == ["--method"] and len(args) > i + 2:
            sys.argv[1:] = [*args[:i + 1], args[i + 2], *args[i + 3:]]
        elif len(args) > i + 1 and args[i + 1].startswith("--method="):
            sys.argv[1:] = [*args[:i + 1], args[i + 1].split("=", 1)[1], *args[i + 2:]]
    try:
        with wide_help_when_piped():
            app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
    except Exception as e:  # none of dpgnn's own errors: one line here, the story in a file
        from flows import clilog

        if clilog.verbose():
            raise
        from dpgnn_core.home import project_dir

        home = project_dir()
        path = clilog.write_traceback(clilog.log_path(home), e)
        full = clilog.disk_full(home)  # before the disk watcher saw it (it looks twice a
        # second; a write fails at once)
        if full is not None:
            give_up(full)  # at once, as the watcher would have: Prefect's exit would wait on
            # its API (a database on a full disk) and print its failures
        else:
            error(f"{type(e).__name__}: {e} (traceback in {path}; --verbose shows it here)")
        sys.exit(1)


if __name__ == "__main__":
    main()
