"""Task ``evaluate``: a trained model and its dataset in, metrics per split out."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from prefect import task

from dpgnn_core.data.store import read_dataset
from dpgnn_core.io import atomic_dir, sha256_file, write_json_atomic
from dpgnn_core.methods import baseline
from tasks._cache import inputs_and_code
from tasks.train import artifact_dir, files_manifest


def artifact_intact(folder: str | Path, files: dict[str, dict[str, Any]]) -> bool:
    """Whether every artifact file exists with its recorded sha256."""
    return all((Path(folder) / n).is_file() and sha256_file(Path(folder) / n) == i["sha256"]
               for n, i in files.items())


def verify_files(folder: str | Path, files: dict[str, dict[str, Any]]) -> None:
    """Raise if an artifact file is missing or differs from its recorded sha256."""
    if not artifact_intact(folder, files):
        raise RuntimeError(f"an artifact under {folder} is missing or changed since it was "
                           "written; re-run with --refresh to rebuild it")


@task(name="evaluate", cache_key_fn=inputs_and_code("evaluate"), persist_result=True,
      result_serializer="json")
def evaluate(dataset: dict[str, Any], model: dict[str, Any]) -> dict[str, Any]:
    """Metrics (accuracy, micro/macro F1, ROC AUC) on train, val and test."""
    verify_files(model["path"], model["files"])
    data = read_dataset(dataset["path"], verify=False)
    path = Path(model["path"]) / "model.pt"
    blob = torch.load(path, map_location="cpu", weights_only=True)
    if blob.get("kind") == "dpgnn":
        from dpgnn_core.methods import dp_gnn

        net, dspec = dp_gnn.load_dpgnn(blob)
        metrics = dp_gnn.evaluate_dpgnn(net, data, dspec.device)
    elif blob.get("kind") == "gap":
        from dpgnn_core.methods import gap

        agg = model["aggregations"]
        verify_files(agg["path"], agg["files"])
        clf, gspec = gap.load_gap(blob)
        xs = torch.load(Path(agg["path"]) / "aggregations.pt", weights_only=True)
        metrics = gap.evaluate_gap(clf, xs, data, gspec.device)
    elif blob.get("kind") == "graph_cls":
        from dpgnn_core.methods import graph_cls

        gnet, cspec = graph_cls.load_graph_classifier(blob)
        metrics = graph_cls.evaluate_graphs(gnet, data, cspec.device)
    elif blob.get("kind") == "drw":
        from dpgnn_core.methods import drw

        net, rspec = drw.load_drw(blob)
        metrics = drw.evaluate_drw(net, data, rspec.device)
    elif blob.get("kind") == "dp_mlp":
        from dpgnn_core.methods import dp_mlp

        mlp, mspec = dp_mlp.load_dp_mlp(blob)
        metrics = dp_mlp.evaluate_dp_mlp(mlp, data, mspec.device)
    else:
        net, spec = baseline.load_model(path)
        metrics = baseline.evaluate(data, baseline.predict(net, data, spec))
    out = artifact_dir("evaluate", dataset["content_sha256"], model["files"])
    clean = {s: {k: (None if math.isnan(v) else v) for k, v in m.items()}
             for s, m in metrics.items()}
    with atomic_dir(out, overwrite=True) as tmp:
        write_json_atomic(tmp / "metrics.json", clean)
        files = files_manifest(tmp, ["metrics.json"])
    return {"path": str(out), "files": files, "metrics": clean}
