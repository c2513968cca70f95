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


def _centroid_accuracy(d: object) -> float:
    """Nearest class centroid (of the training rows) on the test rows."""
    x, y, split = d.x, d.y, d.split  # type: ignore[attr-defined]
    centroids = np.stack([x[(split == 0) & (y == k)].mean(0) for k in range(int(y.max()) + 1)])
    guess = np.argmin(((x[split == 2, None, :] - centroids[None]) ** 2).sum(-1), axis=1)
    return float((guess == y[split == 2]).mean())


def test_csbm_bag_of_words_is_sparse_binary_and_carries_its_class_share() -> None:
    kw = {"num_nodes": 1500, "num_classes": 4, "feature_dim": 600, "avg_degree": 3,
          "feature_kind": "bag_of_words", "words": 20, "seed": 3}
    d = csbm(**kw, class_share=0.4)
    assert d.x.dtype == np.float32 and set(np.unique(d.x)) == {0.0, 1.0}
    per_node = d.x.sum(1)
    assert per_node.min() >= 1 and 15 < per_node.mean() <= 20  # repeats merge
    assert d.meta["source"]["options"]["feature_kind"] == "bag_of_words"
    # The class topic is the signal: none at share 0, most of the test rows at 0.4.
    assert _centroid_accuracy(d) > 0.8
    assert _centroid_accuracy(csbm(**kw, class_share=0.0)) < 0.4
    # The structure is the Gaussian graph's of the same seed (features are drawn after it).
    g = csbm(**{k: v for k, v in kw.items() if k not in ("feature_kind", "words")})
    assert np.array_equal(g.edge_index, d.edge_index) and np.array_equal(g.y, d.y)
    assert "feature_kind" not in g.meta["source"]["options"]  # old manifests unchanged


def test_bag_of_words_through_ingest_options() -> None:
    from dpgnn_core.data.catalog import validate_options
    from dpgnn_core.data.partitioned import ingest_partitioned
    from dpgnn_core.specs.ingest import IngestSpec

    opts = validate_options("synthetic", {"feature_kind": "bag_of_words", "words": 8.0})
    assert opts["feature_kind"] == "bag_of_words"
    for bad in ({"feature_kind": "poisson"}, {"words": 0.0}, {"class_share": 1.5}):
        with pytest.raises(DataError) as e:
            validate_options("synthetic", bad)
        assert next(iter(bad)) in str(e.value)
    spec = IngestSpec(format="synthetic", options={"partition_nodes": 100, "num_nodes": 300,
                                                   "feature_kind": "bag_of_words"})
    with pytest.raises(DataError) as e:
        ingest_partitioned(spec, "/nonexistent/never-written", record={})
    assert e.value.field == "feature_kind"


@pytest.mark.parametrize(("field", "value"), [("num_nodes", 1), ("homophily", 1.5),
                                              ("avg_degree", 0), ("power_law", 1.5),
                                              ("num_classes", 1), ("feature_kind", "poisson"),
                                              ("words", 0), ("class_share", -0.1)])
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
