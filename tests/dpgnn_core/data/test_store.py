from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpgnn_core.data import GraphData, read_dataset, read_manifest, write_dataset
from dpgnn_core.data.store import manifest_digest
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.io import sha256_file, sha256_json


def _graph_task() -> GraphData:
    gid = np.array([0, 0, 0, 1, 1], dtype=np.int64)
    ei = np.array([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]], dtype=np.int64)
    return GraphData(name="tiny-graphs", task="graph",
                     x=np.arange(10, dtype=np.float32).reshape(5, 2), edge_index=ei,
                     y=np.full(5, -1, dtype=np.int64),
                     split=np.array([0, 0, 0, 2, 2], dtype=np.int8), num_classes=2,
                     graph_id=gid, graph_y=np.array([1, 0], dtype=np.int64),
                     graph_split=np.array([0, 2], dtype=np.int8),
                     edge_attr=np.ones((6, 3), dtype=np.float32))


def _rehash(folder: Path) -> None:
    """Make the manifest agree with tampered files, so only the content checks can fire."""
    m = json.loads((folder / "manifest.json").read_text())
    for name in m["files"]:
        m["files"][name]["sha256"] = sha256_file(folder / name)
    m["content_sha256"] = sha256_json({f: h["sha256"] for f, h in m["files"].items()})
    m["manifest_sha256"] = manifest_digest(m)
    (folder / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("make", [lambda: csbm(num_nodes=300, seed=1), _graph_task])
def test_roundtrip_is_exact(tmp_path: Path, make) -> None:
    data = make()
    manifest = write_dataset(data, tmp_path / "ds")
    back = read_dataset(tmp_path / "ds")
    assert back.task == data.task and back.num_classes == data.num_classes
    np.testing.assert_array_equal(back.x, data.x)
    np.testing.assert_array_equal(back.edge_index, data.edge_index)
    np.testing.assert_array_equal(back.y, data.y)
    np.testing.assert_array_equal(back.split, data.split)
    if data.task == "graph":
        np.testing.assert_array_equal(back.graph_y, data.graph_y)
        np.testing.assert_array_equal(back.graph_split, data.graph_split)
        np.testing.assert_array_equal(back.edge_attr, data.edge_attr)
    assert manifest["num_nodes"] == data.num_nodes
    assert set(manifest["files"]) >= {"nodes.parquet", "features.parquet", "edges.parquet"}
    for name, info in manifest["files"].items():
        assert sha256_file(tmp_path / "ds" / name) == info["sha256"]


def test_schema_types(tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=100, feature_dim=7), tmp_path / "ds")
    nodes = pq.read_schema(tmp_path / "ds" / "nodes.parquet")
    assert nodes.field("node_id").type == pa.int64()
    assert nodes.field("label").type == pa.int64()
    assert pa.types.is_dictionary(nodes.field("split").type)
    feats = pq.read_schema(tmp_path / "ds" / "features.parquet")
    assert feats.field("x").type == pa.list_(pa.float32(), 7)
    edges = pq.read_schema(tmp_path / "ds" / "edges.parquet")
    assert edges.field("src").type == pa.int64() and edges.field("dst").type == pa.int64()


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = write_dataset(csbm(num_nodes=200, seed=3), tmp_path / "a")
    b = write_dataset(csbm(num_nodes=200, seed=3), tmp_path / "b")
    c = write_dataset(csbm(num_nodes=200, seed=4), tmp_path / "c")
    assert a["content_sha256"] == b["content_sha256"] != c["content_sha256"]


def test_checksum_mismatch_names_file(tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=100), tmp_path / "ds")
    p = tmp_path / "ds" / "edges.parquet"
    pq.write_table(pq.read_table(p).slice(0, 10), p)
    with pytest.raises(DataError, match="checksum mismatch") as e:
        read_dataset(tmp_path / "ds")
    assert e.value.path == str(p)


def test_non_contiguous_node_ids(tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=50), tmp_path / "ds")
    p = tmp_path / "ds" / "nodes.parquet"
    t = pq.read_table(p)
    ids = np.arange(50, dtype=np.int64)
    ids[10] = 77
    t = t.set_column(0, "node_id", pa.array(ids))
    pq.write_table(t, p)
    _rehash(tmp_path / "ds")
    with pytest.raises(DataError, match="contiguous") as e:
        read_dataset(tmp_path / "ds")
    assert e.value.field == "node_id" and e.value.value == 77


def test_wrong_dtype_and_missing_column(tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=50), tmp_path / "ds")
    p = tmp_path / "ds" / "edges.parquet"
    t = pq.read_table(p)
    pq.write_table(t.set_column(0, "src", t.column("src").cast(pa.int32())), p)
    _rehash(tmp_path / "ds")
    with pytest.raises(DataError, match="type int32") as e:
        read_dataset(tmp_path / "ds")
    assert e.value.field == "src"
    pq.write_table(t.rename_columns(["source", "dst"]), p)
    _rehash(tmp_path / "ds")
    with pytest.raises(DataError, match="missing column") as e:
        read_dataset(tmp_path / "ds")
    assert e.value.field == "src"


def test_edge_out_of_range_detected_on_read(tmp_path: Path) -> None:
    write_dataset(csbm(num_nodes=50), tmp_path / "ds")
    p = tmp_path / "ds" / "edges.parquet"
    t = pq.read_table(p)
    dst = t.column("dst").to_numpy().copy()
    dst[3] = 50
    pq.write_table(t.set_column(1, "dst", pa.array(dst)), p)
    _rehash(tmp_path / "ds")
    with pytest.raises(DataError, match="out of range") as e:
        read_dataset(tmp_path / "ds")
    assert e.value.field == "dst" and e.value.value == 50


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_features_rejected(tmp_path: Path, bad: float) -> None:
    data = csbm(num_nodes=40)
    data.x[7, 3] = bad
    with pytest.raises(DataError, match="NaN or inf") as e:
        write_dataset(data, tmp_path / "ds")
    assert "row 7, column 3" in str(e.value)
    assert not (tmp_path / "ds").exists()


def test_missing_labels_in_split(tmp_path: Path) -> None:
    data = csbm(num_nodes=40)
    idx = int(np.flatnonzero(data.split == 2)[0])
    data.y[idx] = -1
    with pytest.raises(DataError, match="have no label") as e:
        write_dataset(data, tmp_path / "ds")
    assert e.value.value == idx


def test_empty_graph_rejected(tmp_path: Path) -> None:
    data = GraphData(name="empty", task="node", x=np.zeros((0, 3), np.float32),
                     edge_index=np.zeros((2, 0), np.int64), y=np.zeros(0, np.int64),
                     split=np.zeros(0, np.int8), num_classes=2)
    with pytest.raises(DataError, match="no nodes"):
        write_dataset(data, tmp_path / "ds")


def test_manifest_missing_and_bad(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    with pytest.raises(DataError, match=r"manifest\.json is missing"):
        read_manifest(tmp_path / "x")
    (tmp_path / "x" / "manifest.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_manifest(tmp_path / "x")


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pq.write_table

    def boom(table, where, **kw):
        if str(where).endswith("edges.parquet"):
            raise OSError("disk full (injected)")
        return real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError, match="injected"):
        write_dataset(csbm(num_nodes=50), tmp_path / "ds")
    assert list(tmp_path.iterdir()) == []


def test_failed_overwrite_keeps_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = write_dataset(csbm(num_nodes=50, seed=1), tmp_path / "ds")
    with pytest.raises(FileExistsError):
        write_dataset(csbm(num_nodes=50, seed=2), tmp_path / "ds")
    real = pq.write_table

    def boom(table, where, **kw):
        if str(where).endswith("edges.parquet"):
            raise OSError("killed (injected)")
        return real(table, where, **kw)

    monkeypatch.setattr(pq, "write_table", boom)
    with pytest.raises(OSError):
        write_dataset(csbm(num_nodes=50, seed=2), tmp_path / "ds", overwrite=True)
    assert read_manifest(tmp_path / "ds")["content_sha256"] == old["content_sha256"]
    read_dataset(tmp_path / "ds")
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]
    monkeypatch.setattr(pq, "write_table", real)
    new = write_dataset(csbm(num_nodes=50, seed=2), tmp_path / "ds", overwrite=True)
    assert read_manifest(tmp_path / "ds")["content_sha256"] == new["content_sha256"]


def test_multi_label_roundtrip_and_validation(tmp_path: Path) -> None:
    base = csbm(num_nodes=120, num_classes=4, seed=2)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, size=(120, 4)).astype(np.int64)
    y[base.split == 3] = -1
    data = GraphData(name="ml", task="node", x=base.x, edge_index=base.edge_index, y=y,
                     split=base.split, num_classes=4)
    m = write_dataset(data, tmp_path / "ml")
    assert m["multi_label"] is True
    assert pq.read_schema(tmp_path / "ml" / "nodes.parquet").field("label").type == \
        pa.list_(pa.int8(), 4)
    back = read_dataset(tmp_path / "ml")
    assert back.multi_label and np.array_equal(back.y, y)
    bad = y.copy()
    bad[np.flatnonzero(base.split == 0)[0], 2] = 3
    with pytest.raises(DataError, match="only 0/1"):
        write_dataset(GraphData(name="ml", task="node", x=base.x, edge_index=base.edge_index,
                                y=bad, split=base.split, num_classes=4), tmp_path / "bad")
