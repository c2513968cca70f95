"""Loaders on the real datasets in ../shared/datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpgnn_core.data import read_dataset, write_dataset
from dpgnn_core.data.clean import is_symmetric
from dpgnn_core.data.loaders import load_facebook100, load_ogbg, load_planetoid, load_tu
from dpgnn_core.errors import DataError


def test_cora_public_split(shared: Path, tmp_path: Path) -> None:
    d = load_planetoid(shared / "planetoid" / "Cora" / "raw")
    assert (d.num_nodes, d.num_features, d.num_classes) == (2708, 1433, 7)
    assert d.num_edges == 2 * 5278
    c = d.split_counts()
    assert (c["train"], c["val"], c["test"]) == (140, 500, 1000)
    assert np.array_equal(np.flatnonzero(d.mask("train")), np.arange(140))
    assert is_symmetric(d.edge_index, d.num_nodes)
    assert not (d.edge_index[0] == d.edge_index[1]).any()
    # Every class is represented 20 times in Planetoid's training split.
    assert np.bincount(d.y[d.mask("train")]).tolist() == [20] * 7
    write_dataset(d, tmp_path / "cora")
    back = read_dataset(tmp_path / "cora")
    np.testing.assert_array_equal(back.x, d.x)


@pytest.mark.parametrize("seed", [0, 1])
def test_cora_stratified_split(shared: Path, seed: int) -> None:
    src = shared / "planetoid" / "Cora" / "raw"
    public = load_planetoid(src)
    d = load_planetoid(src, fractions=(0.75, 0.10, 0.15), seed=seed)
    # Same graph, features and labels; only the split differs.
    np.testing.assert_array_equal(d.x, public.x)
    np.testing.assert_array_equal(d.y, public.y)
    c = d.split_counts()
    assert c["unused"] == 0 and c["train"] + c["val"] + c["test"] == 2708
    assert abs(c["train"] - 0.75 * 2708) <= 7 and abs(c["test"] - 0.15 * 2708) <= 7
    # Stratified: every class keeps (about) its share of the training split.
    share = np.bincount(d.y[d.mask("train")], minlength=7) / c["train"]
    np.testing.assert_allclose(share, np.bincount(d.y, minlength=7) / 2708, atol=0.01)
    assert d.meta["split"] == {"scheme": "random-stratified", "fractions": [0.75, 0.1, 0.15],
                               "seed": seed}
    other = load_planetoid(src, fractions=(0.75, 0.10, 0.15), seed=seed + 7)
    assert not np.array_equal(d.split, other.split)


def test_planetoid_missing_part(shared: Path, tmp_path: Path) -> None:
    src = shared / "planetoid" / "Cora" / "raw"
    for p in src.iterdir():
        if not p.name.endswith(".ty"):
            (tmp_path / p.name).symlink_to(p)
    with pytest.raises(DataError, match="missing Planetoid part 'ty'"):
        load_planetoid(tmp_path)


@pytest.mark.parametrize("school", ["Caltech36", "Amherst41"])
def test_facebook100_gap_recipe(shared: Path, school: str) -> None:
    d = load_facebook100(shared / "facebook100" / f"{school}.mat", min_class_size=100, seed=0)
    c = d.meta["cleaning"]
    assert c["raw_nodes"] == d.num_nodes + c["dropped_missing_label"] + \
        c["dropped_small_class_nodes"] + c["isolated_nodes_removed"]
    assert all(v >= 2000 for v in c["class_values"])  # years
    assert np.bincount(d.y).min() >= 100 - c["isolated_nodes_removed"]
    assert (d.y >= 0).all()
    assert set(np.unique(d.x)) <= {0.0, 1.0}
    assert d.x.sum(axis=1).max() <= 5  # one-hot of at most five attribute columns
    assert is_symmetric(d.edge_index, d.num_nodes)
    assert (np.bincount(d.edge_index[0], minlength=d.num_nodes) > 0).all()  # no isolated
    counts = d.split_counts()
    assert counts["unused"] == 0
    assert abs(counts["train"] / d.num_nodes - 0.75) < 0.01
    assert abs(counts["test"] / d.num_nodes - 0.15) < 0.01


def test_facebook100_split_seed(shared: Path) -> None:
    f = shared / "facebook100" / "Caltech36.mat"
    a, b, c = (load_facebook100(f, seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.split, b.split) and not np.array_equal(a.split, c.split)


def test_facebook100_min_class_too_large(shared: Path) -> None:
    with pytest.raises(DataError, match="no class has at least") as e:
        load_facebook100(shared / "facebook100" / "Caltech36.mat", min_class_size=10_000)
    assert e.value.field == "min_class_size"


@pytest.mark.parametrize(("name", "graphs", "classes", "feats"), [
    ("MUTAG", 188, 2, 7), ("PROTEINS", 1113, 2, 4), ("ENZYMES", 600, 6, 21)])
def test_tu(shared: Path, name: str, graphs: int, classes: int, feats: int) -> None:
    d = load_tu(shared / "tudataset" / name / "raw")
    assert (d.num_graphs, d.num_classes, d.num_features) == (graphs, classes, feats)
    assert d.task == "graph" and (d.y == -1).all()
    assert np.array_equal(np.unique(d.graph_id), np.arange(graphs))
    assert (d.graph_id[d.edge_index[0]] == d.graph_id[d.edge_index[1]]).all()
    assert sorted(np.unique(d.graph_y).tolist()) == list(range(classes))


def test_fingerprint_merge_drops_empty_graphs(shared: Path, tmp_path: Path) -> None:
    raw = load_tu(shared / "tudataset" / "Fingerprint" / "raw")
    merged = load_tu(shared / "tudataset" / "Fingerprint" / "raw", fingerprint_merge=True)
    assert raw.num_classes == 15 and merged.num_classes == 4
    assert merged.num_graphs == 2800 - 651
    assert merged.meta["cleaning"]["empty_graphs_dropped"] == 651
    assert merged.edge_attr is not None and merged.edge_attr.shape == (merged.num_edges, 2)
    m = write_dataset(merged, tmp_path / "fp")
    assert m["num_graphs"] == 2149 and m["cleaning"]["empty_graphs_dropped"] == 651


def test_ogbg_molbace(shared: Path, tmp_path: Path) -> None:
    d = load_ogbg(shared / "ogbg_molbace")
    c = d.split_counts()
    assert (d.num_graphs, c["train"], c["val"], c["test"]) == (1513, 1210, 151, 152)
    assert d.num_features == 174
    np.testing.assert_array_equal(d.x.sum(axis=1), 9)  # one category per atom feature
    assert d.edge_attr is not None and d.edge_attr.shape[1] == 13
    assert is_symmetric(d.edge_index, d.num_nodes)
    write_dataset(d, tmp_path / "bace")
    assert read_dataset(tmp_path / "bace").num_graphs == 1513
