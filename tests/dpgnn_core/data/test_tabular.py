"""User data from CSV / Parquet, and the bad input it can carry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpgnn_core.data.loaders import load_tabular
from dpgnn_core.errors import DataError


def _write(tmp: Path, edges: str, nodes: str) -> tuple[Path, Path]:
    (tmp / "e.csv").write_text(edges)
    (tmp / "n.csv").write_text(nodes)
    return tmp / "e.csv", tmp / "n.csv"


NODES = "node_id,f1,f2,label\n" + "".join(f"{i},{i * 0.5},{i % 3},{i % 2}\n" for i in range(8))


def test_csv_roundtrip(tmp_path: Path) -> None:
    e, n = _write(tmp_path, "src,dst\n0,1\n1,2\n3,4\n5,6\n6,7\n", NODES)
    d = load_tabular(e, n, undirected=True, seed=0)
    assert d.num_nodes == 8 and d.num_features == 2 and d.num_classes == 2
    assert d.num_edges == 10 and not d.directed
    np.testing.assert_allclose(d.x[:, 0], np.arange(8) * 0.5)


def test_parquet_string_ids_relabel(tmp_path: Path) -> None:
    pq.write_table(pa.table({"a": ["x", "y", "z"], "b": ["y", "z", "x"]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"id": ["z", "x", "y"], "feat": [1.0, 2.0, 3.0],
                             "cls": ["cat", "dog", None]}), tmp_path / "n.parquet")
    d = load_tabular(tmp_path / "e.parquet", tmp_path / "n.parquet", src_col="a", dst_col="b",
                     id_col="id", label_col="cls", relabel=True, fractions=(1.0, 0.0, 0.0))
    # node order is the node table's: z=0, x=1, y=2
    assert sorted(map(tuple, d.edge_index.T.tolist())) == [(0, 1), (1, 2), (2, 0)]
    assert d.y.tolist() == [0, 1, -1]
    assert d.split.tolist()[2] == 3  # unlabeled -> unused


@pytest.mark.parametrize(("edges", "nodes", "kw", "match", "field"), [
    ("s,d\n0,1\n", NODES, {}, "no such column", "src"),
    ("src,dst\n0,1\n", NODES.replace("2,1.0,2,0", "2,inf,2,0"), {}, "NaN or inf", "f1"),
    ("src,dst\n0,1\n", NODES.replace("2,1.0,2,0", "2,,2,0"), {}, "missing values", "f1"),
    ("src,dst\n0,1\n", NODES.replace("\n7,", "\n9,"), {}, "integers 0..7", "node_id"),
    ("src,dst\n0,1\n0,8\n", NODES, {}, "out of range", "dst"),
    ("src,dst\n0,1\n0,1\n", NODES, {}, "duplicate edges", "src,dst"),
    ("src,dst\n0,1\n2,2\n", NODES, {}, "self-loops", "src"),
    ("src,dst\n0,1\n", NODES, {"label_col": "y"}, "no such column", "y"),
    ("src,dst\n0,1\n", NODES, {"feature_cols": ["f1", "f9"]}, "no such column", "f9"),
])
def test_bad_input_names_field(tmp_path: Path, edges: str, nodes: str, kw: dict, match: str,
                               field: str) -> None:
    e, n = _write(tmp_path, edges, nodes)
    with pytest.raises(DataError, match=match) as err:
        load_tabular(e, n, **kw)
    assert err.value.field == field
    assert err.value.path is not None


def test_explicit_cleaning_options(tmp_path: Path) -> None:
    e, n = _write(tmp_path, "src,dst\n0,1\n0,1\n2,2\n3,4\n", NODES)
    d = load_tabular(e, n, dedupe=True, remove_self_loops=True)
    assert d.num_edges == 2
    assert d.meta["cleaning"]["duplicates_removed"] == 1
    assert d.meta["cleaning"]["self_loops_removed"] == 1


def test_unknown_endpoint_with_relabel(tmp_path: Path) -> None:
    e, n = _write(tmp_path, "src,dst\n0,1\n0,99\n", NODES)
    with pytest.raises(DataError, match="not in the node table") as err:
        load_tabular(e, n, relabel=True)
    assert err.value.value == 99


def test_blank_string_labels_are_unlabeled(tmp_path: Path) -> None:
    """A blank or whitespace-only string label is unlabeled (-1), never a class ''."""
    pq.write_table(pa.table({"a": [0, 1, 2, 3], "b": [1, 2, 3, 0]}), tmp_path / "e.parquet")
    pq.write_table(pa.table({"id": [0, 1, 2, 3], "feat": [1.0, 2.0, 3.0, 4.0],
                             "cls": ["cat", "", "dog", "  "]}), tmp_path / "n.parquet")
    d = load_tabular(tmp_path / "e.parquet", tmp_path / "n.parquet", src_col="a", dst_col="b",
                     id_col="id", label_col="cls", fractions=(1.0, 0.0, 0.0))
    assert d.num_classes == 2
    assert d.y.tolist() == [0, -1, 1, -1]
