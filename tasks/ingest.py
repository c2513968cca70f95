"""Task ``ingest``: raw files (or the synthetic generator) to a dataset folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from dpgnn_core.data.ingest import load_from_spec, source_fingerprint
from dpgnn_core.data.store import read_manifest, write_dataset
from dpgnn_core.specs import IngestSpec
from tasks._cache import inputs_and_code
from tasks.config import project_dir
from tasks.progress import Progress
from tasks.refs import DatasetRef


def dataset_summary(folder: str | Path) -> DatasetRef:
    """The small manifest a task passes on: path, content hash and counts."""
    m = read_manifest(folder)
    return {"path": str(Path(folder).resolve()), "name": m["name"],
            "content_sha256": m["content_sha256"], "task": m["task"],
            "num_nodes": m["num_nodes"], "num_edges": m["num_edges"],
            "num_classes": m["num_classes"], "feature_dim": m["feature_dim"]}


def _default_out(spec: IngestSpec) -> Path:
    from dpgnn_core.io import sha256_json

    key = sha256_json({"spec": spec.model_dump(mode="json"), "src": source_fingerprint(spec)})
    return project_dir() / "datasets" / f"{spec.name or spec.format}-{key[:12]}"


def ensure_ingested(spec: IngestSpec) -> Path:
    """The project's folder of ``spec`` (``$DPGNN_HOME/datasets/<name>-<key>``, the
    ``ingest`` task's default), ingested now unless a complete one is there already. The
    key hashes the spec and the source files' fingerprint, so changed raw files or options
    give a new folder. Runs without Prefect (the sweep command calls it before its flow, so
    the points' pre-checks can read the manifest); written atomically."""
    folder = _default_out(spec)
    if not (folder / "manifest.json").is_file():
        write_dataset(load_from_spec(spec), folder, overwrite=folder.exists())
    return folder


def _extra(params: dict[str, Any]) -> Any:
    spec = params["spec"]
    out = params.get("out") or _default_out(spec)
    return {"src": source_fingerprint(spec), "out": str(out)}


@task(name="ingest", cache_key_fn=inputs_and_code("ingest", _extra), persist_result=True,
      result_serializer="json")
def ingest(spec: IngestSpec, out: str | None = None, overwrite: bool = False) -> DatasetRef:
    """Ingest ``spec`` into ``out`` (default: ``$DPGNN_HOME/datasets/<name>-<key>``)."""
    folder = Path(out) if out else _default_out(spec)
    with Progress(f"ingest {spec.name or spec.format}") as shown:
        with shown.span(f"loading {spec.format} data"):
            data = load_from_spec(spec)
        # Folders under the project are ours to replace; a user-named folder only with
        # overwrite.
        with shown.span(f"writing {data.num_nodes:,} nodes, {data.num_edges:,} edges"):
            write_dataset(data, folder,
                          overwrite=overwrite or (out is None and folder.exists()))
    get_run_logger().info("ingested %s: %d nodes, %d edges -> %s", data.name, data.num_nodes,
                          data.num_edges, folder)
    return dataset_summary(folder)
