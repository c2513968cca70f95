"""The bounds the privacy analysis rests on: tested on real and adversarial graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpgnn_core.data.clean import to_undirected
from dpgnn_core.errors import DataError
from dpgnn_core.graph.dpgnn_sampler import sample_edgelists, sample_subgraphs
from dpgnn_core.graph.gap_degree import bound_degree, degrees
from dpgnn_core.privacy import neighbourhood_size


def _check_dpgnn(edge_index: np.ndarray, n: int, train: np.ndarray, k: int, r: int,
                 seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    s = sample_edgelists(edge_index, n, train, k, rng)
    # Sampled edges existed, join training nodes, and every in-degree is at most K.
    orig = set(map(tuple, edge_index.T.tolist()))
    kept = s.edge_index.T.tolist()
    assert all(tuple(e) in orig for e in kept)
    assert train[s.edge_index].all()
    assert np.bincount(s.edge_index[1], minlength=n).max(initial=0) <= k
    sg = sample_subgraphs(s, n, train, r, k)
    bound = neighbourhood_size(k, r)
    assert sg.occurrence_bound == bound
    assert sg.occurrences(n).max() <= bound
    # One subgraph per training node, rooted at it, root first, no repeated node.
    assert np.array_equal(sg.roots, np.flatnonzero(train))
    for i, root in enumerate(sg.roots):
        nodes = sg.nodes[sg.offsets[i]:sg.offsets[i + 1]]
        assert nodes[0] == root and len(set(nodes.tolist())) == nodes.shape[0]
        msg = sg.edges[:, sg.edge_offsets[i]:sg.edge_offsets[i + 1]]
        assert set(msg.ravel().tolist()) <= set(nodes.tolist())
        # Messages run along reversed sampled edges.
        assert all((b, a) in set(map(tuple, kept)) for a, b in msg.T.tolist())


@pytest.mark.parametrize(("k", "r"), [(1, 1), (3, 1), (3, 2), (7, 2)])
def test_cora_bounds(shared: Path, k: int, r: int) -> None:
    from dpgnn_core.data.loaders import load_planetoid

    d = load_planetoid(shared / "planetoid" / "Cora" / "raw")
    train = np.ones(d.num_nodes, dtype=bool)  # the whole graph: the hardest case
    rng = np.random.default_rng(1)
    s = sample_edgelists(d.edge_index, d.num_nodes, train, k, rng)
    sg = sample_subgraphs(s, d.num_nodes, train, r, k)
    assert np.bincount(s.edge_index[1], minlength=d.num_nodes).max() <= k
    assert sg.occurrences(d.num_nodes).max() <= neighbourhood_size(k, r)


@pytest.mark.parametrize("r", [1, 2])
def test_facebook_bounds(shared: Path, r: int) -> None:
    from dpgnn_core.data.loaders import load_facebook100

    d = load_facebook100(shared / "facebook100" / "Amherst41.mat")
    train = d.mask("train")
    s = sample_edgelists(d.edge_index, d.num_nodes, train, 5, np.random.default_rng(0))
    sg = sample_subgraphs(s, d.num_nodes, train, r, 5)
    assert sg.occurrences(d.num_nodes).max() <= neighbourhood_size(5, r)
    assert np.bincount(s.edge_index[1], minlength=d.num_nodes).max() <= 5


def _star(n: int) -> np.ndarray:
    return to_undirected(np.stack([np.zeros(n - 1, np.int64), np.arange(1, n)]), n)


def _clique(n: int) -> np.ndarray:
    a, b = np.triu_indices(n, 1)
    return to_undirected(np.stack([a, b]).astype(np.int64), n)


def _hubs(n: int, hubs: int) -> np.ndarray:
    # every node points to every hub, and hubs point to each other
    src = np.repeat(np.arange(n), hubs)
    dst = np.tile(np.arange(hubs), n)
    keep = src != dst
    return np.stack([src[keep], dst[keep]]).astype(np.int64)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["star", "clique", "hubs", "random"]), n=st.integers(3, 40),
       k=st.integers(1, 6), r=st.integers(0, 3), seed=st.integers(0, 2**31),
       train_frac=st.floats(0.3, 1.0))
def test_adversarial_bounds(kind: str, n: int, k: int, r: int, seed: int,
                            train_frac: float) -> None:
    rng = np.random.default_rng(seed)
    if kind == "star":
        ei = _star(n)
    elif kind == "clique":
        ei = _clique(n)
    elif kind == "hubs":
        ei = _hubs(n, max(1, n // 5))
    else:
        m = n * 3
        ei = np.unique(rng.integers(0, n, (2, m)), axis=1)
    train = rng.random(n) < train_frac
    train[0] = True
    _check_dpgnn(ei, n, train, k, r, seed)


def test_isolated_root_is_singleton_and_bad_input() -> None:
    n = 5
    ei = np.array([[0, 1], [1, 0]], dtype=np.int64)
    train = np.array([True, True, False, True, False])
    s = sample_edgelists(ei, n, train, 2, np.random.default_rng(0))
    sg = sample_subgraphs(s, n, train, 2, 2)
    i = int(np.flatnonzero(sg.roots == 3)[0])
    assert sg.nodes[sg.offsets[i]:sg.offsets[i + 1]].tolist() == [3]
    with pytest.raises(DataError, match="K must be"):
        sample_edgelists(ei, n, train, 0, np.random.default_rng(0))
    with pytest.raises(DataError, match="layers r"):
        sample_subgraphs(s, n, train, -1, 2)
    with pytest.raises(DataError, match="training set is empty"):
        sample_edgelists(ei, n, np.zeros(n, bool), 2, np.random.default_rng(0))


def test_dpgnn_deterministic_per_seed() -> None:
    ei = _clique(30)
    train = np.ones(30, bool)
    a, b, c = (sample_edgelists(ei, 30, train, 3, np.random.default_rng(s)) for s in (4, 4, 5))
    assert np.array_equal(a.edge_index, b.edge_index)
    assert not np.array_equal(a.edge_index, c.edge_index)


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["star", "clique", "hubs", "random"]), n=st.integers(2, 60),
       d=st.integers(1, 8), seed=st.integers(0, 2**31))
def test_gap_degree_bound(kind: str, n: int, d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    if kind == "star":
        ei, directed = _star(n), False
    elif kind == "clique":
        ei, directed = _clique(n), False
    elif kind == "hubs":
        ei, directed = _hubs(n, max(1, n // 4)), True
    else:
        ei, directed = np.unique(rng.integers(0, n, (2, 4 * n)), axis=1), True
        ei = ei[:, ei[0] != ei[1]]
    out = bound_degree(ei, n, d, directed=directed, rng=rng)
    assert degrees(out, n, directed=directed).max(initial=0) <= d
    assert set(map(tuple, out.T.tolist())) <= set(map(tuple, ei.T.tolist()))
    if not directed:  # stays symmetric
        assert set(map(tuple, out.T.tolist())) == set(map(tuple, out[::-1].T.tolist()))


def test_gap_degree_bound_real_and_errors(shared: Path) -> None:
    from dpgnn_core.data.loaders import load_facebook100

    d = load_facebook100(shared / "facebook100" / "Caltech36.mat")
    for bound in (1, 10, 100):
        out = bound_degree(d.edge_index, d.num_nodes, bound, directed=False,
                           rng=np.random.default_rng(0))
        deg = degrees(out, d.num_nodes, directed=False)
        assert deg.max() <= bound
        # nodes with few neighbours keep most of their edges
        if bound == 100:
            assert out.shape[1] > 0.5 * d.num_edges
    with pytest.raises(DataError, match="D must be"):
        bound_degree(d.edge_index, d.num_nodes, 0, directed=False, rng=np.random.default_rng(0))
    a = bound_degree(d.edge_index, d.num_nodes, 5, directed=False, rng=np.random.default_rng(3))
    b = bound_degree(d.edge_index, d.num_nodes, 5, directed=False, rng=np.random.default_rng(3))
    assert np.array_equal(a, b)
