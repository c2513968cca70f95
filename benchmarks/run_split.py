"""Where a `dpgnn run`'s own CPU time goes (issue 52 §7): the CLI in this process, with the
heavy imports made up front and timed, and the flow's parts timed by wrapping them.

CPU seconds (user + sys of this process, ``time.process_time``) so that a loaded machine
gives the same split; the Prefect server's own CPU is not counted (another process).
Usage: python benchmarks/run_split.py run gap-edp --dataset data/cora --epsilon 1 --seed 1
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable
from typing import Any

SPLIT: dict[str, float] = {}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def inner(*a: Any, **k: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            SPLIT[name] = SPLIT.get(name, 0.0) + time.process_time() - t
    return inner


def _import(name: str, *modules: str) -> None:
    import importlib

    t = time.process_time()
    for m in modules:
        importlib.import_module(m)
    SPLIT[name] = time.process_time() - t


def main() -> None:
    """Time the imports, wrap the flow's parts, run the CLI, print the split as JSON."""
    start = time.process_time()
    _import("import: CLI (typer, specs)", "flows.cli")
    import os

    from flows import server

    # as `dpgnn run` does before Prefect's import: Prefect reads its API URL once, and
    # without one each flow would start an ephemeral server in this process
    os.environ["PREFECT_API_URL"] = server.api_url_if_running() or sys.exit(
        "start `dpgnn server` first: this splits a run against the background server")
    _import("import: prefect", "tasks", "prefect")
    _import("import: torch (the methods, tasks.evaluate)", "torch")
    _import("import: dp_accounting, scipy.stats (budget, odometer)", "tasks.budget")
    _import("import: rest of flows.pipeline", "flows.pipeline")
    _import("import: mlflow and its SQLite store", "mlflow.tracking",
            "mlflow.store.tracking.sqlalchemy_store")
    import flows.pipeline as fp
    import tasks.staged as ts

    fp._run = _timed("flow: cached steps (Prefect task runs)", fp._run)
    ts.run_cached = _timed("flow: cached steps (Prefect task runs)", ts.run_cached)
    fp.account_after = _timed("flow: odometer (account_after)", fp.account_after)
    fp.record_run = _timed("flow: MLflow record_run (log_run task)", fp.record_run)
    import flows.cli.execute as ex
    from dpgnn_core.methods import preflight

    ex.run_pipeline = _timed("flow: all of it, with Prefect's flow run", ex.run_pipeline)
    preflight.check = _timed("pre-flight checks (CLI and flow)", preflight.check)
    from flows.cli import main as cli

    sys.argv = ["dpgnn", *sys.argv[1:]]
    try:
        cli()
    except SystemExit:
        pass
    SPLIT["total (this process)"] = time.process_time() - start
    print(json.dumps({k: round(v, 2) for k, v in SPLIT.items()}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    main()
