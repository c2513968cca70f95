"""A reader gets one version of a dataset folder whole, even while an ingest replaces it,
and a run's pinned version or a clear refusal (issue 48 §2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpgnn_core.data import store
from dpgnn_core.data.store import read_dataset, write_dataset
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import ArtifactError, DataError


def _versions(folder: Path) -> tuple[Any, str]:
    """Write version 1 of ``folder``; returns its data and content sha256."""
    v1 = csbm(num_nodes=120, seed=1)
    return v1, write_dataset(v1, folder)["content_sha256"]


def test_a_swap_during_a_read_does_not_mix_versions(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The folder is replaced (same sizes, other features and split) after the manifest
    was read, as the first table is read: every table read is still version 1's."""
    ds = tmp_path / "ds"
    v1, _ = _versions(ds)
    v2 = csbm(num_nodes=120, seed=2)
    read_table = store.pq.read_table
    swapped: list[bool] = []

    def swap_then_read(*args: Any, **kwargs: Any) -> Any:
        if not swapped:
            swapped.append(True)
            write_dataset(v2, ds, overwrite=True)
        return read_table(*args, **kwargs)

    monkeypatch.setattr(store.pq, "read_table", swap_then_read)
    got = read_dataset(ds)
    assert swapped
    np.testing.assert_array_equal(got.x, v1.x)
    np.testing.assert_array_equal(got.split, v1.split)
    np.testing.assert_array_equal(got.edge_index, v1.edge_index)
    np.testing.assert_array_equal(read_dataset(ds).x, v2.x)  # the next read: version 2


def test_a_pinned_read_of_a_replaced_folder_is_refused_naming_both(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    v1, sha1 = _versions(ds)
    np.testing.assert_array_equal(read_dataset(ds, content_sha256=sha1).x, v1.x)
    sha2 = write_dataset(csbm(num_nodes=120, seed=2), ds, overwrite=True)["content_sha256"]
    with pytest.raises(DataError) as e:
        read_dataset(ds, content_sha256=sha1, verify=False)
    msg = str(e.value)
    assert isinstance(e.value, ArtifactError)  # what a task's caller treats as changed
    assert "\n" not in msg and str(ds) in msg, msg
    assert sha1[:12] in msg and sha2[:12] in msg and "re-ingested" in msg, msg


def test_a_listed_file_that_is_missing_is_named(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    _versions(ds)
    (ds / "edges.parquet").unlink()
    with pytest.raises(DataError, match="missing") as e:
        read_dataset(ds)
    assert str(ds / "edges.parquet") in str(e.value)


def test_a_changed_file_fails_its_checksum(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    _versions(ds)
    p = ds / "nodes.parquet"
    p.write_bytes(p.read_bytes()[:-1] + b"\0")
    with pytest.raises(DataError, match="checksum mismatch") as e:
        read_dataset(ds)
    assert str(p) in str(e.value)


@pytest.mark.parametrize("pinned", [False, True])
def test_a_version_deleted_before_its_files_opened_is_read_again_or_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pinned: bool) -> None:
    """The folder is replaced (and the old version deleted) between the manifest read and
    the files' opening: an unpinned read reads the new version whole; a pinned one is
    refused, naming both versions."""
    from dpgnn_core.data.version import FolderVersion

    ds = tmp_path / "ds"
    _, sha1 = _versions(ds)
    v2 = csbm(num_nodes=80, seed=2)
    open_files = FolderVersion.open_files
    shas: list[str] = []

    def replace_then_open(self: FolderVersion, names: list[str]) -> None:
        if not shas:
            shas.append(write_dataset(v2, ds, overwrite=True)["content_sha256"])
        open_files(self, names)

    monkeypatch.setattr(FolderVersion, "open_files", replace_then_open)
    if not pinned:
        np.testing.assert_array_equal(read_dataset(ds).x, v2.x)
        return
    with pytest.raises(ArtifactError) as e:
        read_dataset(ds, content_sha256=sha1)
    assert sha1[:12] in str(e.value) and shas[0][:12] in str(e.value)
