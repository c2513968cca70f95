from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgnn_core.data.synthetic import csbm
from dpgnn_core.errors import DataError
from dpgnn_core.graph.random_walk import drw, drw_partitions
from dpgnn_core.graph.subgraphs import build_batch


@pytest.fixture(scope="module")
def graph():
    return csbm(num_nodes=800, avg_degree=6, seed=3)


def _connected(nodes: np.ndarray, edges: np.ndarray) -> bool:
    adj: dict[int, set[int]] = {int(v): set() for v in nodes}
    for a, b in edges.T.tolist():
        adj[a].add(b)
        adj[b].add(a)
    seen, todo = {int(nodes[0])}, [int(nodes[0])]
    while todo:
        for w in adj[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return len(seen) == nodes.shape[0]


@pytest.mark.parametrize(("length", "restarts"), [(1, 1), (4, 1), (3, 3)])
def test_drw_partition_properties(graph, length: int, restarts: int) -> None:
    train = graph.mask("train")
    sg = drw(graph.edge_index, graph.num_nodes, train, length, restarts=restarts, rng=1)
    occ = sg.occurrences(graph.num_nodes)
    assert occ.max() == 1 and sg.occurrence_bound == 1  # disjoint
    assert (occ[train] == 1).all() and (occ[~train] == 0).all()  # a partition of train
    assert sg.sizes().max() <= restarts * length + 1
    assert len(set(sg.roots.tolist())) == sg.num_subgraphs  # a root roots one subgraph
    orig = set(map(tuple, graph.edge_index.T.tolist()))
    for i in range(0, sg.num_subgraphs, 7):
        nodes, edges = sg.subgraph(i)
        assert nodes[0] == sg.roots[i]
        assert set(map(tuple, edges.T.tolist())) <= orig
        assert _connected(nodes, edges)


def test_drw_deterministic_and_dynamic(graph) -> None:
    train = graph.mask("train")
    a = drw(graph.edge_index, graph.num_nodes, train, 3, rng=5)
    b = drw(graph.edge_index, graph.num_nodes, train, 3, rng=5)
    assert np.array_equal(a.nodes, b.nodes) and np.array_equal(a.offsets, b.offsets)
    parts = drw_partitions(graph.edge_index, graph.num_nodes, train, 3, rng=5)
    p1, p2 = next(parts), next(parts)
    assert not np.array_equal(p1.nodes, p2.nodes)
    again = next(drw_partitions(graph.edge_index, graph.num_nodes, train, 3, rng=5))
    assert np.array_equal(again.nodes, p1.nodes)


def test_drw_isolated_root_and_bad_input() -> None:
    ei = np.array([[0, 1], [1, 0]], dtype=np.int64)
    train = np.ones(3, bool)
    sg = drw(ei, 3, train, 4, rng=0)
    sizes = {int(sg.roots[i]): int(s) for i, s in enumerate(sg.sizes())}
    assert sizes.get(2) == 1  # node 2 has no edge: a subgraph of itself
    for kwargs, match in (({"walk_length": 0}, "walk length"),
                          ({"walk_length": 2, "restarts": 0}, "restarts")):
        with pytest.raises(DataError, match=match):
            drw(ei, 3, train, **kwargs)
    with pytest.raises(DataError, match="training set is empty"):
        drw(ei, 3, np.zeros(3, bool), 2)


def test_dense_batch(graph) -> None:
    train = graph.mask("train")
    sg = drw(graph.edge_index, graph.num_nodes, train, 4, rng=0)
    ids = np.arange(0, sg.num_subgraphs, 3)[:16]
    batch = build_batch(sg, ids, graph.x, size=8)
    assert batch.x.shape == (16, 8, graph.num_features)
    for b, i in enumerate(ids):
        nodes, edges = sg.subgraph(int(i))
        k = nodes.shape[0]
        assert torch.equal(batch.x[b, :k], torch.from_numpy(graph.x[nodes]))
        assert batch.mask[b, :k].all() and not batch.mask[b, k:].any()
        assert batch.x[b, k:].abs().sum() == 0
        # (D+I)^-1 (A+I): rows of real nodes sum to 1; padding rows are empty.
        np.testing.assert_allclose(batch.adj[b, :k].sum(dim=1).numpy(), 1.0, rtol=1e-6)
        assert batch.adj[b, k:].abs().sum() == 0 and batch.adj[b, :, k:].abs().sum() == 0
        raw = build_batch(sg, np.array([i]), graph.x, size=8, normalisation="none").adj[0]
        pos = {int(v): j for j, v in enumerate(nodes)}
        assert int(raw.sum()) == edges.shape[1]
        for s, d in edges.T.tolist():
            assert raw[pos[d], pos[s]] == 1.0
    assert int(batch.roots[0]) == int(sg.roots[ids[0]])
    with pytest.raises(DataError, match="padded size"):
        build_batch(sg, ids, graph.x, size=1)
