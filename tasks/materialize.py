"""Task ``materialize_subgraphs``: a dataset and a sampler spec in, a subgraph artifact out."""

from __future__ import annotations

from typing import Any

from prefect import task

from dpgnn_core.graph.materialize import materialize
from dpgnn_core.specs import SamplerSpec
from tasks._cache import inputs_and_code
from tasks.train import artifact_dir


@task(name="materialize_subgraphs", cache_key_fn=inputs_and_code("materialize_subgraphs"),
      persist_result=True, result_serializer="json")
def materialize_subgraphs(dataset: dict[str, Any], spec: SamplerSpec) -> dict[str, Any]:
    """Cached on the dataset's sha256, the sampler spec (seed included) and the code version.
    Returns ``{"path", "files", "occurrence_bound", "sampling_scheme", ...}``."""
    out = artifact_dir("subgraphs", dataset["content_sha256"], spec)
    manifest = materialize(dataset["path"], spec, out, overwrite=True)
    keep = ("num_subgraphs", "max_size", "occurrence_bound", "sampling_scheme",
            "content_sha256", "num_nodes", "num_edges")
    return {"path": str(out), "files": manifest["files"],
            **{k: manifest[k] for k in keep if k in manifest}}
