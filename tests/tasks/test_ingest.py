"""``ensure_ingested``: a sweep spec's ``[dataset]`` table, ingested once into the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgnn_core.data.store import read_manifest
from dpgnn_core.specs import IngestSpec
from tasks.ingest import ensure_ingested


def test_ingested_once_then_reused_and_options_give_a_new_folder(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    spec = IngestSpec(format="synthetic", options={"num_nodes": 60, "seed": 3})
    folder = ensure_ingested(spec)
    assert folder.parent == (tmp_path / "home" / "datasets").resolve()
    manifest = read_manifest(folder)
    assert manifest["num_nodes"] == 60
    stamp = (folder / "manifest.json").stat().st_mtime_ns
    assert ensure_ingested(spec) == folder  # reused, not rewritten
    assert (folder / "manifest.json").stat().st_mtime_ns == stamp
    other = ensure_ingested(IngestSpec(format="synthetic", options={"num_nodes": 60,
                                                                    "seed": 4}))
    assert other != folder and read_manifest(other)["content_sha256"] != \
        manifest["content_sha256"]


def test_a_half_written_folder_is_ingested_again(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    spec = IngestSpec(format="synthetic", options={"num_nodes": 40})
    folder = ensure_ingested(spec)
    (folder / "manifest.json").unlink()  # as if a copy had stopped half-way
    assert read_manifest(ensure_ingested(spec))["num_nodes"] == 40


def test_a_folder_from_before_manifest_sha256_is_ingested_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 33 §2: the project's own folder written by an older dpgnn (no
    manifest_sha256), which every run would refuse, is ingested again from its source."""
    import json

    monkeypatch.setenv("DPGNN_HOME", str(tmp_path / "home"))
    spec = IngestSpec(format="synthetic", options={"num_nodes": 40})
    folder = ensure_ingested(spec)
    path = folder / "manifest.json"
    old = json.loads(path.read_text())
    del old["manifest_sha256"]
    path.write_text(json.dumps(old))
    assert ensure_ingested(spec) == folder
    again = read_manifest(folder)  # reads back: the hash is there and right
    assert again["content_sha256"] == old["content_sha256"]  # same data, same id
