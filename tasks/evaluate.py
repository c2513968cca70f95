"""Task ``evaluate``: a trained model and its dataset in, metrics per split out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from prefect import task

from dpgnn_core.errors import ArtifactError
from dpgnn_core.io import atomic_dir, sha256_file, write_json_atomic
from tasks._cache import inputs_and_code
from tasks.config import RunContext, in_context
from tasks.refs import DatasetRef, EvalRef, Files, ModelRef
from tasks.train import artifact_dir, files_manifest, load_keyed_dataset


def artifact_intact(folder: str | Path, files: Files) -> bool:
    """Whether every artifact file exists with its recorded sha256."""
    return all((Path(folder) / n).is_file() and sha256_file(Path(folder) / n) == i["sha256"]
               for n, i in files.items())


def verify_files(folder: str | Path, files: Files) -> None:
    """Raise if an artifact file is missing or differs from its recorded sha256."""
    if not artifact_intact(folder, files):
        raise ArtifactError(f"an artifact under {folder} is missing or changed since it was "
                            "written; re-run with --refresh to rebuild it")


@task(name="evaluate", cache_key_fn=inputs_and_code("evaluate"), persist_result=True,
      result_serializer="json")
def evaluate(dataset: DatasetRef, model: ModelRef, context: RunContext | None = None
             ) -> EvalRef:
    """Metrics (accuracy, micro/macro F1, ROC AUC) on train, val and test; ``context`` as
    for :func:`tasks.train.train`."""
    with in_context(context):
        return _evaluate(dataset, model)


def _evaluate(dataset: DatasetRef, model: ModelRef) -> EvalRef:
    verify_files(model["path"], model["files"])
    data = load_keyed_dataset(dataset, verify=False)  # the run's version, or refused
    from dpgnn_core.methods.registry import load_blob

    blob = torch.load(Path(model["path"]) / "model.pt", map_location="cpu", weights_only=True)
    method, net, spec = load_blob(blob)  # the registry decides the method
    extra: dict[str, Any] = {}
    if "aggregations" in model:  # GAP predicts from its cached private release
        agg = model["aggregations"]
        verify_files(agg["path"], agg["files"])
        extra["aggregations"] = torch.load(Path(agg["path"]) / "aggregations.pt",
                                           weights_only=True)
    metrics = method.evaluate(net, data, spec, extra)
    out = artifact_dir("evaluate", dataset["content_sha256"], model["files"])
    clean = {s: {k: (None if math.isnan(v) else v) for k, v in m.items()}
             for s, m in metrics.items()}
    with atomic_dir(out, overwrite=True) as tmp:
        write_json_atomic(tmp / "metrics.json", clean)
        files = files_manifest(tmp, ["metrics.json"])
    return {"path": str(out), "files": files, "metrics": clean}
