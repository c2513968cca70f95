"""Task ``explain``: GNNExplainer on a private and a non-private graph classifier; IoU of
their explanations and a side-by-side picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from prefect import task

from dpgnn_core.io import atomic_dir, write_json_atomic
from tasks._cache import inputs_and_code
from tasks.evaluate import verify_files
from tasks.refs import DatasetRef, report_of
from tasks.train import artifact_dir, files_manifest, load_keyed_dataset


def _model(manifest: dict[str, Any]) -> Any:
    from dpgnn_core.methods.registry import load_blob

    verify_files(manifest["path"], manifest["files"])
    blob = torch.load(Path(manifest["path"]) / "model.pt", map_location="cpu",
                      weights_only=True)
    return load_blob(blob)[1]


@task(name="explain", cache_key_fn=inputs_and_code("explain"), persist_result=True,
      result_serializer="json")
def explain(dataset: DatasetRef, private: dict[str, Any], nonprivate: dict[str, Any],
            count: int = 20, epochs: int = 100, threshold: float = 0.2) -> dict[str, Any]:
    """Explain the first ``count`` test graphs with both models; writes
    ``explanations.json`` (mean and per-graph IoUs) and ``explanations.png``."""
    from dpgnn_core.methods import explain as ex

    data = load_keyed_dataset(dataset)
    ids = np.flatnonzero(np.asarray(data.graph_split) == 2)[:count]
    a = ex.explain(_model(private), data, ids, epochs=epochs, threshold=threshold)
    b = ex.explain(_model(nonprivate), data, ids, epochs=epochs, threshold=threshold)
    summary = {**ex.compare(a, b), "threshold": threshold, "epochs": epochs,
               "note": "explanations read the test graphs; they are not differentially "
                       "private"}
    out = artifact_dir("explain", dataset["content_sha256"], private["files"],
                       nonprivate["files"], count, epochs, threshold)
    with atomic_dir(out, overwrite=True) as tmp:
        write_json_atomic(tmp / "explanations.json", summary)
        report = report_of(private)
        label = (f"private model (ε = {report.epsilon:.3g})" if report.private
                 else "private model")
        ex.plot(a, b, tmp / "explanations.png", threshold=threshold, private_label=label,
                ious=[r["iou_private_nonprivate"] for r in summary["graphs"]])
        files = files_manifest(tmp, ["explanations.json", "explanations.png"])
    return {"path": str(out), "files": files,
            **{k: v for k, v in summary.items() if k.startswith("iou_")}}
