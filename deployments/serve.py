"""Serve the pipeline as scheduled Prefect deployments (long-running process).

Usage::

    dpgnn server start                 # or any Prefect API: export PREFECT_API_URL=...
    python deployments/serve.py        # registers the deployments and runs them on schedule

The nightly deployment re-runs the demo baselines (cached steps are reused, each run gets a
new MLflow run); ``pipeline-adhoc`` has no schedule and is triggered with
``prefect deployment run 'dpgnn-pipeline/pipeline-adhoc' -p dataset=/path/to/ds``.
"""

# ruff: noqa: I001 - `tasks` must configure Prefect's environment before prefect is imported.
from __future__ import annotations

import os

import tasks  # noqa: F401
from prefect import serve

from dpgnn_core.specs import DEMO_INGEST, DEMO_METHODS, TrainSpec
from flows.pipeline import pipeline


def deployments() -> list:
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
    return [*nightly, adhoc]


if __name__ == "__main__":
    serve(*deployments())
