"""Serve the pipeline as scheduled Prefect deployments (long-running process).

Usage::

    dpgnn server start                 # or any Prefect API: export PREFECT_API_URL=...
    python deployments/serve.py        # registers the deployments and runs them on schedule
    python deployments/serve.py private-retrain   # only the deployments named

The nightly deployment re-runs the demo baselines (cached steps are reused, each run gets a
new MLflow run); ``pipeline-adhoc`` has no schedule and is triggered with
``prefect deployment run 'dpgnn-pipeline/pipeline-adhoc' -p dataset=/path/to/ds``.

``private-retrain`` (flow ``dpgnn-retrain``, :mod:`flows.retrain`) retrains a private model
daily at 04:00 UTC, a new release charged to the dataset's privacy budget each time, and
fails without training once the budget is spent. Its parameters are read here, when the
deployment is registered:

* ``DPGNN_RETRAIN_DATASET``: the dataset folder (default: ``$DPGNN_HOME/datasets/
  retrain-demo``, ingested from the embedded demo graph);
* ``DPGNN_RETRAIN_INGEST``: the folder's raw source as an ingest spec in JSON, e.g.
  ``{"format": "csv", "source": "/data/raw/edges.csv", "options": {"nodes":
  "/data/raw/nodes.csv"}}``; a changed source is re-ingested into the folder before
  training (default: none, the folder is used as it is; the demo's spec with the default
  folder);
* ``DPGNN_RETRAIN_SPEC``: the private method's spec in JSON (default:
  ``{"method": "dp-mlp", "epsilon": 2}``);
* ``DPGNN_RETRAIN_CRON``: the schedule (default: ``0 4 * * *``, UTC).

At most one run of it at a time: a run triggered while one is under way waits for it.

Served runs log at Prefect's INFO level (``PREFECT_LOGGING_LEVEL``, unless you set it):
each completed ``private-retrain`` run leaves its summary in its flow run's log, as under a
worker. Ctrl-C (or SIGTERM) stops serving: Prefect pauses the served deployments' schedules
and this process exits at once, without the seconds Python spends tearing down the
modules it imported.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

import asyncio
import atexit
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Before `tasks`, which defaults Prefect's level to WARNING for the command line: a served
# run's log (in the terminal and in Prefect) shows its INFO records, as a worker's does.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")

import tasks  # noqa: F401
from prefect import aserve
from prefect.schedules import Cron

from dpgnn_core.data.ingest import absolute_spec
from dpgnn_core.home import project_dir
from dpgnn_core.specs import DEMO_INGEST, DEMO_METHODS, IngestSpec, TrainSpec, parse_spec
from flows.pipeline import pipeline
from flows.retrain import retrain

#: The retrain deployment's method when ``DPGNN_RETRAIN_SPEC`` is unset.
RETRAIN_SPEC = {"method": "dp-mlp", "epsilon": 2.0}


def deployments() -> list[Any]:
    """The deployments this project serves."""
    nightly = [
        pipeline.to_deployment(
            name=f"nightly-{method}",
            cron=os.environ.get("DPGNN_NIGHTLY_CRON", "0 3 * * *"),
            parameters={"spec": TrainSpec(method=method).model_dump(),
                        "ingest_spec": DEMO_INGEST.model_dump()},
            tags=["dpgnn", "nightly"],
        )
        for method in DEMO_METHODS
    ]
    adhoc = pipeline.to_deployment(
        name="pipeline-adhoc", parameters={"spec": TrainSpec(method="gcn").model_dump()},
        tags=["dpgnn", "adhoc"])
    return [*nightly, adhoc, retrain_deployment()]


def retrain_parameters() -> dict[str, Any]:
    """The ``private-retrain`` deployment's parameters, from the ``DPGNN_RETRAIN_*``
    environment variables (see the module docstring)."""
    folder = os.environ.get("DPGNN_RETRAIN_DATASET")
    ingest = os.environ.get("DPGNN_RETRAIN_INGEST")
    if folder is None:  # the self-contained demo: the embedded graph, ingested on first run
        folder = str(project_dir() / "datasets" / "retrain-demo")
        ingest = ingest or DEMO_INGEST.model_dump_json()
    spec = _from_env("DPGNN_RETRAIN_SPEC", parse_spec,
                     os.environ.get("DPGNN_RETRAIN_SPEC") or json.dumps(RETRAIN_SPEC))
    params = {"spec": spec.model_dump(mode="json"),
              "dataset": str(Path(folder).expanduser().resolve())}
    if ingest:  # its files named absolutely: runs may start in another directory
        params["ingest_spec"] = absolute_spec(_from_env(
            "DPGNN_RETRAIN_INGEST", lambda d: IngestSpec(**d), ingest)).model_dump(mode="json")
    return params


def _from_env(name: str, build: Any, text: str) -> Any:
    """``build`` of the JSON object in environment variable ``name`` (its value ``text``).

    Raises:
        ValueError: one line naming the variable and what is wrong (not JSON, not an
            object, or what the spec refuses), which :func:`main` prints instead of a
            traceback.
    """
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("give a JSON object")
        return build(data)
    except ValueError as e:  # json's and pydantic's errors are ValueErrors
        errors = getattr(e, "errors", None)
        why = ("; ".join(f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg')}"
                         for err in errors()) if callable(errors) else str(e))
        raise ValueError(f"{name}={text!r}: {' '.join(why.split())}") from None


def retrain_deployment() -> Any:
    """``private-retrain``: scheduled private retraining (:mod:`flows.retrain`), one run at
    a time."""
    return retrain.to_deployment(
        name="private-retrain",
        schedules=[Cron(os.environ.get("DPGNN_RETRAIN_CRON", "0 4 * * *"), timezone="UTC")],
        parameters=retrain_parameters(),
        tags=["dpgnn", "private", "retrain"],
        concurrency_limit=1,
    )


#: After Ctrl-C, how long Prefect's own shutdown (its runner pauses the schedules) may take
#: before serve exits anyway.
SHUTDOWN_GRACE_S = 15.0


def _exit_later() -> None:
    """End the process ``SHUTDOWN_GRACE_S`` from now unless it has ended by then."""
    def run() -> None:
        time.sleep(SHUTDOWN_GRACE_S)
        print(f"serve: Prefect's shutdown did not finish {SHUTDOWN_GRACE_S:g} s after Ctrl-C; "
              "exiting", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    threading.Thread(target=run, name="serve-exit-watchdog", daemon=True).start()


async def _serve(served: list[Any]) -> None:
    """Prefect's ``aserve`` under ``asyncio.run``, whose own Ctrl-C handling stays: the
    first Ctrl-C cancels the serving task, so Prefect's runner leaves its task group and
    stops as it does under ``prefect.serve``, and ``asyncio.run`` then raises
    KeyboardInterrupt (a second Ctrl-C raises it at once). On top of it, the first Ctrl-C
    starts a watchdog (:func:`_exit_later`): on a loaded machine the cancellation was
    sometimes absorbed (nothing logged, the process alive minutes later). A handler of our
    own that raised KeyboardInterrupt wherever the main thread was instead could land in
    the runner's bookkeeping of a finished run, and asyncio printed a traceback.

    After a Ctrl-C, an exception that a task raises as ``asyncio.run`` cancels it at
    shutdown is one line on standard error, not asyncio's traceback: Prefect's runner
    still reads a finished run's output and closes its process for a moment after the
    process exits, and a Ctrl-C in that moment ended in "unhandled exception during
    asyncio.run() shutdown" and 30 lines. Before a Ctrl-C asyncio's own handler reports."""
    cancel = signal.getsignal(signal.SIGINT)  # asyncio.Runner's: cancels this task
    loop = asyncio.get_running_loop()
    earlier = loop.get_exception_handler()
    stopping: list[bool] = []

    def reported(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not stopping:
            if earlier is not None:
                earlier(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        exc = context.get("exception")
        what = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
        print(f"serve: while stopping after Ctrl-C: {context.get('message')}{what}",
              file=sys.stderr)

    # kept after this coroutine ends: asyncio.run's shutdown, which cancels what is left,
    # reports through it
    loop.set_exception_handler(reported)

    def interrupted(signum: int, frame: Any) -> None:
        stopping.append(True)
        _exit_later()
        if callable(cancel):
            cancel(signum, frame)
        else:
            signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, interrupted)
    try:
        await aserve(*served)
    finally:  # asyncio.run restores the interpreter's handler after its own
        signal.signal(signal.SIGINT, cancel)


def main(names: list[str]) -> None:
    """Serve the deployments ``names`` (all without names) until Ctrl-C or SIGTERM, then
    exit at once: the exit handlers run (Prefect's included) and the output is flushed, but
    not the interpreter's teardown of every imported module (about 7 s on 2 busy cores,
    after Prefect has already stopped)."""
    wanted = set(names)
    try:
        served = [d for d in deployments() if not wanted or d.name in wanted]
    except ValueError as e:  # a malformed DPGNN_RETRAIN_* variable: one line, no traceback
        sys.exit(f"serve: error: {e}")
    unknown = wanted - {d.name for d in served}
    if unknown:
        sys.exit(f"no deployment named {', '.join(sorted(unknown))}")
    code = 0
    try:
        asyncio.run(_serve(served))  # SIGTERM raises SystemExit(0)
    except KeyboardInterrupt:
        print("serve: Ctrl-C: stopped serving", file=sys.stderr)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
