"""The ``dpgnn`` command line.

Heavy modules (torch, Prefect, MLflow, pyarrow) are imported inside the commands that need
them, so ``dpgnn --help`` and ``dpgnn datasets`` answer at once.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from flows.cli.common import (
    Format,
    OneLineErrors,
    console,
    error,
    find_datasets,
    parse_kv,
    stdout_to_stderr,
)

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
    home: Annotated[Path | None, typer.Option(
        help="Project directory (datasets, artifacts, caches, MLflow store).",
        envvar="DPGNN_HOME")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Show full logs and tracebacks on the terminal (else "
        "they go to a log file under the home, named in the error line).")] = False,
) -> None:
    if home is not None:
        os.environ["DPGNN_HOME"] = str(home.resolve())
    if verbose:
        os.environ["DPGNN_VERBOSE"] = "1"


@app.command()
def ingest(  # noqa: C901 -- issue 27 §4 rebuilds it from the loader option specs
    format: Annotated[Format, typer.Option("--format", "-f", help="Raw format.")],
    out: Annotated[Path, typer.Option(help="Dataset folder to create (manifest and Parquet "
                                      "files directly inside).")],
    source: Annotated[Path | None, typer.Option(
        help="Raw data: Planetoid folder with ind.<name>.*; Facebook100 .mat file; TU folder "
        "with NAME_A.txt; OGB dataset folder; dgl: a file written by dgl.save_graphs (needs the "
        "dgl extra); csv/parquet edge file (or a folder with edges.* "
        "and nodes.*). Not used by synthetic.")] = None,
    name: Annotated[str | None, typer.Option(help="Dataset name (inferred by default).")] = None,
    nodes: Annotated[Path | None, typer.Option(help="csv/parquet: the node table.")] = None,
    seed: Annotated[int | None, typer.Option(help="Split (and generator) seed.")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing --out folder.")] = False,
    disjoint: Annotated[bool, typer.Option(
        help="Inductive variant: remove every edge between different splits.")] = False,
    remove_self_loops: Annotated[bool, typer.Option(help="Drop self-loops (else an error).")
                                 ] = False,
    dedupe_edges: Annotated[bool, typer.Option(help="Drop duplicate edges (else an error).")
                            ] = False,
    min_class_size: Annotated[int | None, typer.Option(
        help="facebook100: drop classes smaller than this (default 100).")] = None,
    fingerprint_merge: Annotated[bool, typer.Option(
        help="tu: Fingerprint's 4-class Galton-Henry merge.")] = False,
    src_col: Annotated[str | None, typer.Option(help="csv/parquet: source column.")] = None,
    dst_col: Annotated[str | None, typer.Option(help="csv/parquet: target column.")] = None,
    id_col: Annotated[str | None, typer.Option(help="csv/parquet: node id column.")] = None,
    label_col: Annotated[str | None, typer.Option(help="csv/parquet: label column.")] = None,
    feature_cols: Annotated[str | None, typer.Option(
        help="csv/parquet: comma-separated feature columns (default: all numeric).")] = None,
    split_col: Annotated[str | None, typer.Option(
        help="csv/parquet: column of train/val/test/unused (default: random split).")] = None,
    undirected: Annotated[bool, typer.Option(help="csv/parquet: add reverse edges.")] = False,
    relabel: Annotated[bool, typer.Option(
        help="csv/parquet: map arbitrary node ids to 0..n-1.")] = False,
    allow_no_edges: Annotated[bool, typer.Option(
        help="Ingest a graph with no edges (else an error); the manifest's 'cleaning' "
        "record keeps a warning.")] = False,
    option: Annotated[list[str] | None, typer.Option(
        "--option", "-o", help="Any other loader option as KEY=VALUE (JSON value), e.g. "
        "-o num_nodes=10000 -o homophily=0.7 for synthetic.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")
                       ] = False,
) -> None:
    """Ingest raw data into a dataset folder (Parquet + manifest), atomically."""
    opts: dict[str, Any] = parse_kv(option or [])
    fmt = format.value
    if seed is not None and fmt not in ("planetoid", "ogb"):
        opts["seed"] = seed
    flags = {"remove_self_loops": remove_self_loops, "dedupe": dedupe_edges}
    if fmt in ("tu", "dgl", "csv", "parquet"):
        opts.update({k: v for k, v in flags.items() if v})
    elif any(flags.values()):
        error(f"--remove-self-loops/--dedupe-edges do not apply to {fmt} (its recipe fixes "
             "edge handling; see the manifest's 'cleaning' record)")
        raise typer.Exit(2)
    if min_class_size is not None:
        opts["min_class_size"] = min_class_size
    if fingerprint_merge:
        opts["fingerprint_merge"] = True
    tab = {"src_col": src_col, "dst_col": dst_col, "id_col": id_col, "label_col": label_col,
           "split_col": split_col}
    opts.update({k: v for k, v in tab.items() if v is not None})
    if feature_cols:
        opts["feature_cols"] = [c.strip() for c in feature_cols.split(",") if c.strip()]
    if undirected:
        opts["undirected"] = True
    if relabel:
        opts["relabel"] = True
    if nodes is not None:
        opts["nodes"] = str(nodes)
    if disjoint:
        opts["disjoint"] = True
    if allow_no_edges:
        opts["allow_no_edges"] = True
    if fmt != "synthetic" and source is None:
        error(f"--source is required for --format {fmt}")
        raise typer.Exit(2)

    from dpgnn_core.data.ingest import load_from_spec
    from dpgnn_core.data.store import write_dataset
    from dpgnn_core.errors import DpgnnError
    from dpgnn_core.io import TargetExistsError
    from dpgnn_core.specs import IngestSpec

    if out.exists() and not overwrite:
        error(f"{out} already exists; pass --overwrite to replace it (the old folder stays "
             "until the new one is complete)")
        raise typer.Exit(2)
    stage = "read"
    try:
        spec = IngestSpec(format=fmt, source=str(source) if source else None, name=name,
                          options=opts)
        with console().status(f"ingesting {fmt} data…"), stdout_to_stderr():
            data = load_from_spec(spec)
            stage = "write"
            manifest = write_dataset(data, out, overwrite=overwrite)
    except (DpgnnError, TargetExistsError, ValueError) as e:
        error(str(e))
        raise typer.Exit(1) from e
    except OSError as e:  # permissions, read-only or full disk, a file where a folder goes
        target = out if stage == "write" else (source or out)
        reason = e.strerror or str(e) or type(e).__name__
        hidden = f".{out.name}."  # our temp siblings: an internal name, not worth showing
        if e.filename is not None and Path(str(e.filename)) != target \
                and not Path(str(e.filename)).name.startswith(hidden):
            reason += f" ({e.filename})"
        error(f"cannot {stage} {target}: {reason}")
        raise typer.Exit(1) from e
    for warning in manifest.get("cleaning", {}).get("warnings", []):
        typer.secho(f"warning: {warning}", fg=typer.colors.YELLOW, err=True)
    if as_json:
        print(json.dumps(manifest))
    else:
        typer.echo(f"wrote {out}: {manifest['name']} ({manifest['task']}), "
                   f"{manifest['num_nodes']} nodes, {manifest['num_edges']} edges, "
                   f"{manifest['num_graphs']} graphs, {manifest['feature_dim']} features, "
                   f"{manifest['num_classes']} classes, splits {manifest['split_counts']}"
                   + "".join(f"; {n}" for n in manifest.get("cleaning", {}).get("notes", [])))


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
    """List ingested datasets with their counts."""
    from dpgnn_core.home import project_dir

    roots = [root] if root is not None else [Path("data"), project_dir() / "datasets"]
    found = [d for r in roots for d in find_datasets(r)]
    root = root or Path(" and ".join(str(r) for r in roots))
    if as_json:
        for p, m in found:
            print(json.dumps({"path": str(p), **{k: m.get(k) for k in (
                "name", "task", "num_nodes", "num_edges", "num_graphs", "feature_dim",
                "num_classes", "split_counts", "content_sha256")}}))
        return
    if not found:
        typer.echo(f"no datasets under {root}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "task", "nodes", "edges", "graphs", "features", "classes",
                  "train/val/test", "path")
    for p, m in found:
        s = m.get("split_counts", {})
        table.add_row(m.get("name", "?"), m.get("task", "?"), f"{m.get('num_nodes', 0):,}",
                      f"{m.get('num_edges', 0):,}", str(m.get("num_graphs", 0)),
                      str(m.get("feature_dim")), str(m.get("num_classes")),
                      f"{s.get('train')}/{s.get('val')}/{s.get('test')}", str(p))
    Console().print(table)


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
    from dpgnn_core.data.ingest import load_from_spec
    from dpgnn_core.data.store import write_dataset
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
            write_dataset(load_from_spec(DEMO_INGEST), folder, overwrite=True)
    spec_file = home / "demo-sweep.json"
    spec_file.write_text(SweepSpec(**{**DEMO_SWEEP, "dataset": str(folder)})
                         .model_dump_json(indent=2))
    from flows.cli.sweep import sweep_command

    sweep_command(spec_file, dask_address=None, workers=workers, tracking_uri=None,
                  experiment="dpgnn-demo", refresh=False, as_json=as_json)


@server_app.command("start")
def server_start(port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 4242) -> None:
    """Start the background Prefect server (SQLite under the project)."""
    from dpgnn_core.errors import ServerError
    from flows import server

    try:
        with console().status("starting Prefect server (first start migrates its DB)…"):
            info = server.start(port=port)
    except ServerError as e:
        error(str(e))
        raise typer.Exit(1) from e
    typer.echo(f"Prefect server running at {info['url']} (pid {info['pid']}); `dpgnn run` "
               "uses it while it is up")


@server_app.command("stop")
def server_stop() -> None:
    """Stop the background Prefect server."""
    from flows import server

    typer.echo(server.stop_server().message)


@server_app.command("status")
def server_status(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Say whether the background Prefect server is up."""
    from flows import server

    st = server.status()
    if as_json:
        print(json.dumps(st))
    elif st["running"]:
        typer.echo(f"running at {st['url']} (pid {st['pid']})")
    else:
        typer.echo("not running")


def main() -> None:
    # The earlier form `dpgnn run --method NAME ...` stays as an alias of `dpgnn run NAME`.
    args = sys.argv[1:]
    if "run" in args:
        i = args.index("run")
        if args[i + 1:i + 2] == ["--method"] and len(args) > i + 2:
            sys.argv[1:] = [*args[:i + 1], args[i + 2], *args[i + 3:]]
        elif len(args) > i + 1 and args[i + 1].startswith("--method="):
            sys.argv[1:] = [*args[:i + 1], args[i + 1].split("=", 1)[1], *args[i + 2:]]
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
    except Exception as e:  # none of dpgnn's own errors: one line here, the story in a file
        from flows import clilog

        if clilog.verbose():
            raise
        from dpgnn_core.home import project_dir

        path = clilog.write_traceback(clilog.log_path(project_dir()), e)
        error(f"{type(e).__name__}: {e} (traceback in {path}; --verbose shows it here)")
        sys.exit(1)


if __name__ == "__main__":
    main()
