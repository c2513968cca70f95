"""Task ``log_run``: the only module of dpgnn that imports MLflow.

Uses ``MlflowClient`` with an explicit tracking URI and run id (never the fluent, thread-local
active run), so it is safe in Prefect's worker threads. MLflow is a record of runs, not a
cache: this task is never cached and every pipeline run makes one MLflow run.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from prefect import task

from tasks.config import project_dir

DEFAULT_EXPERIMENT = "dpgnn"


def default_tracking_uri() -> str:
    """SQLite store under the project directory (MLflow's file store is an error now)."""
    home = project_dir()
    home.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{home / 'mlflow.db'}"


def _experiment(client: Any, name: str, tracking_uri: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return str(exp.experiment_id)
    location = None
    if tracking_uri.startswith("sqlite:"):
        location = (project_dir() / "mlartifacts").resolve().as_uri()
    return str(client.create_experiment(name, artifact_location=location))


def _flat(prefix: str, obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(f"{key}.", v))
        else:
            out[key] = v
    return out


#: ``cache_policy=None``: Prefect accepts it (and then keeps no cache policy at all), but its
#: type hints only list CachePolicy or NotSet; typed Any so the call checks unchanged.
_NO_CACHE_POLICY: Any = None


@task(name="log_run", cache_policy=_NO_CACHE_POLICY, persist_result=False)
def log_run(
    *,
    run_name: str,
    params: dict[str, Any],
    history_path: str | None,
    metrics: dict[str, dict[str, float | None]],
    artifacts: list[str],
    tags: dict[str, str],
    tracking_uri: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> dict[str, str]:
    """Create one MLflow run: params, per-epoch metrics, final metrics, artifacts.

    Returns ``{"run_id", "experiment_id", "tracking_uri"}``.
    """
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or default_tracking_uri()
    client = MlflowClient(tracking_uri=uri)
    exp_id = _experiment(client, experiment, uri)
    run = client.create_run(exp_id, run_name=run_name,
                            tags={"mlflow.runName": run_name, **tags})
    run_id = run.info.run_id
    try:
        now = int(time.time() * 1000)
        flat = {k: v for k, v in _flat("", params).items()}
        client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in flat.items()],
                         tags=[RunTag(k, v) for k, v in tags.items()])
        series: list[Metric] = []
        if history_path:
            history = json.loads(Path(history_path).read_text())
            for rec in history:
                step = int(rec.get("epoch", rec.get("step", 0)))
                for k, v in rec.items():
                    if k not in ("epoch", "step") and v is not None and not math.isnan(v):
                        series.append(Metric(k, float(v), now, step))
        for split, m in metrics.items():
            for k, v in m.items():
                if v is not None and not math.isnan(v):
                    series.append(Metric(f"{split}_{k}", float(v), now, 0))
        for i in range(0, len(series), 900):
            client.log_batch(run_id, metrics=series[i:i + 900])
        for path in artifacts:
            client.log_artifact(run_id, path)
        client.set_terminated(run_id, "FINISHED")
    except Exception:
        client.set_terminated(run_id, "FAILED")
        raise
    return {"run_id": run_id, "experiment_id": exp_id, "tracking_uri": uri}
