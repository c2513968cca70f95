from __future__ import annotations

import numpy as np
import pytest

from dpgnn_core.data.clean import clean_edges, is_symmetric, to_undirected
from dpgnn_core.data.splits import make_disjoint, stratified_split
from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError


@pytest.mark.parametrize("power_law", [None, 2.5])
def test_csbm_structure(power_law: float | None) -> None:
    d = csbm(num_nodes=2000, avg_degree=12, homophily=0.9, power_law=power_law, seed=5)
    assert is_symmetric(d.edge_index, d.num_nodes)
    assert not (d.edge_index[0] == d.edge_index[1]).any()
    keys = d.edge_index[0] * d.num_nodes + d.edge_index[1]
    assert np.unique(keys).size == keys.size
    # Hubs draw repeated pairs, merged as duplicates: fewer distinct edges under power law.
    assert (0.85 if power_law is None else 0.6) < d.num_edges / (2000 * 12) <= 1.0
    same = (d.y[d.edge_index[0]] == d.y[d.edge_index[1]]).mean()
    assert abs(same - 0.9) < 0.03


def test_csbm_power_law_has_hubs() -> None:
    flat = csbm(num_nodes=5000, avg_degree=10, seed=0)
    heavy = csbm(num_nodes=5000, avg_degree=10, power_law=2.2, seed=0)
    assert np.bincount(heavy.edge_index[0]).max() > 3 * np.bincount(flat.edge_index[0]).max()


def test_csbm_deterministic_per_seed() -> None:
    a, b, c = csbm(seed=1), csbm(seed=1), csbm(seed=2)
    assert np.array_equal(a.edge_index, b.edge_index) and np.array_equal(a.x, b.x)
    assert np.array_equal(a.split, b.split)
    assert not np.array_equal(a.edge_index, c.edge_index)


def test_csbm_feature_signal() -> None:
    d = csbm(num_nodes=3000, feature_signal=4.0, seed=0)
    means = np.stack([d.x[d.y == k].mean(0) for k in range(d.num_classes)])
    spread = np.linalg.norm(means - means.mean(0), axis=1).mean()
    none = csbm(num_nodes=3000, feature_signal=0.0, seed=0)
    means0 = np.stack([none.x[none.y == k].mean(0) for k in range(none.num_classes)])
    assert spread > 5 * np.linalg.norm(means0 - means0.mean(0), axis=1).mean()


@pytest.mark.parametrize(("field", "value"), [("num_nodes", 1), ("homophily", 1.5),
                                              ("avg_degree", 0), ("power_law", 1.5),
                                              ("num_classes", 1)])
def test_csbm_invalid(field: str, value: float) -> None:
    with pytest.raises(DataError) as e:
        csbm(**{field: value})
    assert e.value.field == field


def test_stratified_split_proportions() -> None:
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(4), [100, 200, 300, 400]).astype(np.int64)
    y[:10] = -1
    s = stratified_split(y, (0.6, 0.2, 0.2), rng=rng)
    assert (s[:10] == 3).all()
    for c in range(4):
        m = y == c
        frac = np.bincount(s[m], minlength=4) / m.sum()
        np.testing.assert_allclose(frac[:3], [0.6, 0.2, 0.2], atol=0.01)
    with pytest.raises(DataError):
        stratified_split(y, (0.5, 0.5, 0.5), rng=rng)


def test_disjoint_removes_every_inter_split_edge() -> None:
    d = csbm(num_nodes=1000, seed=0)
    dj, removed = make_disjoint(d)
    s = dj.split
    assert (s[dj.edge_index[0]] == s[dj.edge_index[1]]).all()
    cross = (d.split[d.edge_index[0]] != d.split[d.edge_index[1]]).sum()
    assert removed == cross > 0 and dj.num_edges == d.num_edges - removed
    assert dj.name.endswith("-disjoint") and dj.meta["split"]["inductive"]


def test_clean_edges_counts_and_keeps_order_index() -> None:
    ei = np.array([[0, 2, 0, 1, 1], [1, 2, 1, 0, 3]], dtype=np.int64)
    with pytest.raises(DataError, match="self-loops"):
        clean_edges(ei, 4)
    with pytest.raises(DataError, match="1 duplicate"):
        clean_edges(ei, 4, remove_self_loops=True)
    out, counts, idx = clean_edges(ei, 4, remove_self_loops=True, dedupe=True)
    assert counts == {"self_loops": 1, "duplicate_edges": 1}
    assert out.T.tolist() == [[0, 1], [1, 0], [1, 3]]
    np.testing.assert_array_equal(ei[:, idx], out)
    und = to_undirected(np.array([[0], [3]]), 4)
    assert und.T.tolist() == [[0, 3], [3, 0]]
