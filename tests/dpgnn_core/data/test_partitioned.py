"""Partitioned dataset folders (issue 51): the block-wise CSBM, its manifest and the
tampering checks over every partition."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data.ingest import ingest
from dpgnn_core.data.manifest import quick_problem
from dpgnn_core.data.partitioned import (
    _dst_block_edges,
    node_bounds,
    part_name,
    read_partitioned,
    verify_partitioned,
    write_partitioned_csbm,
)
from dpgnn_core.data.store import read_dataset, verify_folder
from dpgnn_core.errors import DataError
from dpgnn_core.specs import IngestSpec


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("part") / "csbm"
    write_partitioned_csbm(out, partition_nodes=700, num_nodes=3000, avg_degree=10,
                           homophily=0.8, seed=3)
    return out


def test_partitioned_csbm_is_a_valid_undirected_csbm(folder: Path) -> None:
    data = read_partitioned(folder)
    m = json.loads((folder / "manifest.json").read_text())
    src, dst = data.edge_index
    assert m["layout"] == "partitioned" and m["num_edges"] == src.shape[0]
    assert m["partitions"]["bounds"] == [[0, 700], [700, 1400], [1400, 2100], [2100, 2800],
                                         [2800, 3000]]
    pairs = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert len(pairs) == src.shape[0] and (src != dst).all()
    assert all((b, a) in pairs for a, b in pairs)  # both directions of every pair
    assert 9.0 < np.bincount(dst, minlength=3000).mean() <= 10.0
    assert abs((data.y[src] == data.y[dst]).mean() - 0.8) < 0.03
    # every class's nodes cluster around its own mean: the features carry the labels
    means = np.stack([data.x[data.y == k].mean(0) for k in range(5)])
    assert (np.linalg.norm(means - means.mean(0), axis=1) > 0.5).all()
    assert sum(m["split_counts"].values()) == 3000


def test_each_destination_block_is_drawn_alone(folder: Path) -> None:
    """A destination block's edges come from that block's draws only (so no process
    holds the whole graph), and every edge partition holds exactly its range's edges."""
    data = read_partitioned(folder)
    bounds = node_bounds(3000, 700)
    for i, (lo, hi) in enumerate(bounds):
        alone, _ = _dst_block_edges(3, i, bounds, 3000, 3000 * 10 / 2, 0.8, 5)
        mine = data.edge_index[:, (data.edge_index[1] >= lo) & (data.edge_index[1] < hi)]
        assert np.array_equal(alone, mine)


def test_same_seed_same_dataset(folder: Path, tmp_path: Path) -> None:
    again = write_partitioned_csbm(tmp_path / "again", partition_nodes=700, num_nodes=3000,
                                   avg_degree=10, homophily=0.8, seed=3)
    assert again["content_sha256"] == json.loads(
        (folder / "manifest.json").read_text())["content_sha256"]


def _copy(folder: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(folder, tmp_path / "copy"))


def test_a_changed_partition_is_refused_before_any_work(folder: Path, tmp_path: Path) -> None:
    work = _copy(folder, tmp_path)
    verify_partitioned(work)
    victim = work / part_name("edges", 3)
    blob = bytearray(victim.read_bytes())
    blob[len(blob) // 2] ^= 1
    victim.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="checksum mismatch") as err:
        verify_partitioned(work)
    assert "edges/part-00003.parquet" in str(err.value)


def test_a_missing_partition_or_an_edited_manifest_is_refused(folder: Path,
                                                              tmp_path: Path) -> None:
    work = _copy(folder, tmp_path)
    manifest = json.loads((work / "manifest.json").read_text())
    manifest["partitions"]["edge_rows"][0] += 1
    (work / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="manifest_sha256"):
        verify_partitioned(work)
    work2 = _copy(folder, tmp_path / "b")
    (work2 / part_name("features", 4)).unlink()
    assert quick_problem(work2, json.loads((work2 / "manifest.json").read_text())) \
        == "features/part-00004.parquet is missing"
    with pytest.raises(DataError, match="missing") as err:
        verify_partitioned(work2)
    assert "features/part-00004.parquet" in str(err.value)


def test_dpgnn_ingest_writes_partitions_and_single_file_runs_refuse_them(
        tmp_path: Path) -> None:
    spec = IngestSpec(format="synthetic", options={"num_nodes": 500, "partition_nodes": 200,
                                                   "seed": 1})
    manifest = ingest(spec, tmp_path / "d")
    assert manifest["partitions"]["bounds"] == [[0, 200], [200, 400], [400, 500]]
    assert manifest["ingest"]["spec"]["options"]["partition_nodes"] == 200
    assert len(manifest["files"]) == 9
    verify_partitioned(tmp_path / "d")
    with pytest.raises(DataError, match="partitioned dataset folder"):
        read_dataset(tmp_path / "d")
    with pytest.raises(DataError, match="partitioned dataset folder"):  # a run's pre-check
        verify_folder(tmp_path / "d", manifest)
    with pytest.raises(DataError, match="power_law"):
        ingest(IngestSpec(format="synthetic", options={"partition_nodes": 200,
                                                       "power_law": 2.5}), tmp_path / "e")
    # the single-file format is untouched
    single = ingest(IngestSpec(format="synthetic", options={"num_nodes": 500}), tmp_path / "f")
    assert "layout" not in single and read_dataset(tmp_path / "f").num_nodes == 500


def test_nan_features_in_a_partition_are_refused(tmp_path: Path) -> None:
    """A partition with a NaN feature (written with a consistent manifest, so no checksum
    catches it) is refused when read, naming the partition, as the single-file reader
    refuses NaN features."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dpgnn_core.data.partitioned import read_feature_block

    folder = tmp_path / "d"
    write_partitioned_csbm(folder, partition_nodes=100, num_nodes=300, feature_dim=4)
    p = folder / part_name("features", 1)
    x = read_feature_block(folder, 1).copy()
    x[7, 2] = np.nan
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(
        pa.array(x.reshape(-1)), 4)}), p)
    with pytest.raises(DataError, match="NaN or inf") as err:
        read_feature_block(folder, 1)
    assert "features/part-00001.parquet" in str(err.value) and "row 7" in str(err.value)
