"""``update_dataset``: a dataset folder brought up to date with its raw source, in place."""

from __future__ import annotations

from pathlib import Path

from prefect.logging import disable_run_logger

from dpgnn_core.data.store import read_manifest
from dpgnn_core.specs import IngestSpec
from tasks.ingest import update_dataset

NODES = "node_id,f1,label\n" + "".join(f"{i},{i * 0.5},{i % 2}\n" for i in range(8))


def _source(raw: Path, nodes: str = NODES) -> IngestSpec:
    raw.mkdir(exist_ok=True)
    (raw / "edges.csv").write_text("src,dst\n0,1\n1,2\n3,4\n5,6\n6,7\n")
    (raw / "nodes.csv").write_text(nodes)
    return IngestSpec(format="csv", source=str(raw / "edges.csv"),
                      options={"nodes": str(raw / "nodes.csv"), "undirected": True})


def test_ingested_reused_then_reingested_in_place(tmp_path: Path) -> None:
    spec, folder = _source(tmp_path / "raw"), str(tmp_path / "ds")
    with disable_run_logger():
        first = update_dataset.fn(spec, folder)
        assert first["action"] == "ingested" and first["previous_sha256"] is None
        stamp = (tmp_path / "ds" / "manifest.json").stat().st_mtime_ns
        again = update_dataset.fn(spec, folder)
        assert again["action"] == "reused" and again["dataset"] == first["dataset"]
        assert (tmp_path / "ds" / "manifest.json").stat().st_mtime_ns == stamp
        _source(tmp_path / "raw", NODES.replace("\n3,1.5,", "\n3,7.5,"))
        new = update_dataset.fn(spec, folder)
    assert new["action"] == "re-ingested"
    assert new["previous_sha256"] == first["dataset"]["content_sha256"]
    assert new["dataset"]["content_sha256"] != first["dataset"]["content_sha256"]
    assert new["dataset"]["path"] == first["dataset"]["path"]
    assert read_manifest(folder)["content_sha256"] == new["dataset"]["content_sha256"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ds.")] == []
