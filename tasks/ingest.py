"""Task ``ingest``: raw files (or the synthetic generator) to a dataset folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from dpgnn_core.data.ingest import ingest as ingest_dataset
from dpgnn_core.data.ingest import ingest_status, source_fingerprint
from dpgnn_core.data.store import read_manifest
from dpgnn_core.errors import DataError
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
    the points' pre-checks can read the manifest); written atomically. A folder whose
    manifest does not read back (written by an older dpgnn, without ``manifest_sha256``,
    or edited) is ingested again: it is the project's, made from the same source."""
    folder = _default_out(spec)
    try:
        read_manifest(folder)
    except DataError:
        ingest_dataset(spec, folder, overwrite=folder.exists(), owned=True)
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
        # Folders under the project are ours to replace; a user-named folder only with
        # overwrite.
        manifest = ingest_dataset(spec, folder,
                                  overwrite=overwrite or (out is None and folder.exists()),
                                  owned=out is None,
                                  span=lambda _stage, text: shown.span(text))
    get_run_logger().info("ingested %s: %d nodes, %d edges -> %s", manifest["name"],
                          manifest["num_nodes"], manifest["num_edges"], folder)
    return dataset_summary(folder)


@task(name="update-dataset")
def update_dataset(spec: IngestSpec, folder: str) -> dict[str, Any]:
    """Bring the dataset folder ``folder`` up to date with its raw source ``spec``: ingest
    it when there is none, re-ingest it in place when the source's files (or the spec)
    differ from what its manifest records, else leave it as it is. Not cached: whether the
    source changed is what it checks.

    A re-ingest writes the new version beside the old one and swaps it in only once it is
    complete (:func:`~dpgnn_core.data.store.write_dataset`), so a run that reads the folder
    sees either version whole; a second writer of the folder fails at once. A new version
    in the same folder keeps the folder's privacy budget (:mod:`dpgnn_core.budget`).

    Args:
        spec (IngestSpec): the raw source and how to ingest it.
        folder (str): the dataset folder.

    Returns:
        dict: ``dataset`` (the folder's :class:`~tasks.refs.DatasetRef` now), ``action``
        (``ingested``, ``re-ingested`` or ``reused``), ``reason`` (why, in words) and
        ``previous_sha256`` (the content sha256 it replaced, or None).
    """
    log = get_run_logger()
    path = Path(folder)
    status, reason = ingest_status(path, spec)
    if status == "current":
        log.info("dataset %s is up to date: %s", path, reason)
        return {"dataset": dataset_summary(path), "action": "reused", "reason": reason,
                "previous_sha256": None}
    previous = None
    if status == "stale":
        try:
            previous = read_manifest(path)["content_sha256"]
        except DataError:  # an unreadable manifest: the folder is replaced all the same
            previous = None
    with Progress(f"ingest {spec.name or spec.format}") as shown:
        ingest_dataset(spec, path, overwrite=status == "stale",
                       span=lambda _stage, text: shown.span(text))
    ref = dataset_summary(path)
    action = "ingested" if status == "missing" else "re-ingested"
    log.info("%s %s (%s): content sha256 %s%s", action, path, reason,
             ref["content_sha256"][:12],
             f", was {previous[:12]}" if previous and previous != ref["content_sha256"]
             else "")
    return {"dataset": ref, "action": action, "reason": reason, "previous_sha256": previous}
