"""The manifest's ``ingest`` record and :func:`ingest_status`: whether a dataset folder still
holds what its raw source would give (scheduled retraining re-ingests when it does not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpgnn_core.data.ingest import ingest_status, load_from_spec, source_sha256
from dpgnn_core.data.store import read_manifest, write_dataset
from dpgnn_core.errors import DataError
from dpgnn_core.specs import IngestSpec

NODES = "node_id,f1,f2,label\n" + "".join(f"{i},{i * 0.5},{i % 3},{i % 2}\n" for i in range(8))
EDGES = "src,dst\n0,1\n1,2\n3,4\n5,6\n6,7\n"


def _source(raw: Path, nodes: str = NODES) -> IngestSpec:
    raw.mkdir(exist_ok=True)
    (raw / "edges.csv").write_text(EDGES)
    (raw / "nodes.csv").write_text(nodes)
    return IngestSpec(format="csv", source=str(raw / "edges.csv"),
                      options={"nodes": str(raw / "nodes.csv"), "undirected": True})


def _ingest(spec: IngestSpec, folder: Path) -> dict:
    return write_dataset(load_from_spec(spec), folder, overwrite=folder.exists())


def test_manifest_records_the_spec_and_the_raw_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _source(tmp_path / "raw")
    manifest = _ingest(spec, tmp_path / "ds")
    assert manifest["ingest"] == {"spec": spec.model_dump(mode="json"),
                                  "source_sha256": source_sha256(spec)}
    # Paths are recorded absolute: the record names the same files from anywhere.
    monkeypatch.chdir(tmp_path)
    relative = IngestSpec(format="csv", source="raw/edges.csv",
                          options={"nodes": "raw/nodes.csv", "undirected": True})
    assert load_from_spec(relative).meta["ingest"] == manifest["ingest"]
    assert read_manifest(tmp_path / "ds")["ingest"] == manifest["ingest"]
    # Not part of the dataset's identity: the same data without the record has the same id.
    plain = load_from_spec(spec)
    plain.meta.pop("ingest")
    assert write_dataset(plain, tmp_path / "plain")["content_sha256"] == \
        manifest["content_sha256"]
    assert "ingest" not in read_manifest(tmp_path / "plain")
    synthetic = IngestSpec(format="synthetic", options={"num_nodes": 50})
    assert _ingest(synthetic, tmp_path / "syn")["ingest"]["source_sha256"] is None


def test_status_follows_the_source(tmp_path: Path) -> None:
    spec = _source(tmp_path / "raw")
    folder = tmp_path / "ds"
    assert ingest_status(folder, spec)[0] == "missing"
    _ingest(spec, folder)
    assert ingest_status(folder, spec) == (
        "current", "the source and the spec are those it was ingested from")
    # The same files named from elsewhere (a moved or copied source) are the same source.
    moved = _source(tmp_path / "copy")
    assert ingest_status(folder, moved)[0] == "current"
    # A changed file is a new version.
    _source(tmp_path / "raw", NODES.replace("\n3,1.5,", "\n3,9.5,"))
    status, reason = ingest_status(folder, spec)
    assert status == "stale" and reason.startswith("the source changed since it was ingested")
    _ingest(spec, folder)
    assert ingest_status(folder, spec)[0] == "current"
    # Other options: another dataset.
    other = IngestSpec(**{**spec.model_dump(), "options": {**spec.options, "seed": 1}})
    assert ingest_status(folder, other) == (
        "stale", "it was ingested with another spec (format, name or options)")


def test_status_without_a_record_or_a_source(tmp_path: Path) -> None:
    spec = _source(tmp_path / "raw")
    folder = tmp_path / "ds"
    _ingest(spec, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    del manifest["ingest"]  # a folder ingested before manifests kept the record
    (folder / "manifest.json").write_text(json.dumps(manifest))
    status, reason = ingest_status(folder, spec)
    assert status == "stale" and "does not record the source" in reason
    _ingest(spec, folder)
    (tmp_path / "raw" / "nodes.csv").unlink()
    with pytest.raises(DataError, match="source not found"):
        ingest_status(folder, spec)


def test_a_manifest_a_run_would_refuse_is_stale(tmp_path: Path) -> None:
    """Issue 33 §2: no manifest_sha256 (an older dpgnn) or an edited key: re-ingested by a
    scheduled retraining, not refused by it."""
    spec = _source(tmp_path / "raw")
    folder = tmp_path / "ds"
    _ingest(spec, folder)
    path = folder / "manifest.json"
    original = json.loads(path.read_text())
    for change in ({"manifest_sha256": None}, {"directed": True}):
        path.write_text(json.dumps({k: v for k, v in {**original, **change}.items()
                                    if v is not None}))
        status, reason = ingest_status(folder, spec)
        assert status == "stale" and "manifest_sha256" in reason, (change, reason)
    _ingest(spec, folder)
    assert ingest_status(folder, spec)[0] == "current"
