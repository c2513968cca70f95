"""Degree bounds for node-level PMA: GAP's edge sampler is not stable under node removal
(coupling counter-example), the check GAP-NDP uses instead refuses graphs beyond D, and on
graphs within D the aggregation moves by at most the implemented sensitivity."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from dpgnn_core.errors import DataError
from dpgnn_core.graph.gap_degree import (
    _select,
    bound_degree,
    check_degree_bound,
    max_degree_for_pma,
)
from dpgnn_core.methods.gap import aggregation_matrix, row_normalise, sensitivity


def _hub(leaves: int = 300, others: int = 5, seed: int = 0) -> np.ndarray:
    """Undirected pairs (u < w): hub 0 joined to ``leaves`` nodes, each of which has
    ``others`` more neighbours among a pool of third nodes (so degree others + 1)."""
    rng = np.random.default_rng(seed)
    pool = np.arange(leaves + 1, leaves + 1 + leaves * others // 2)
    pairs = {(0, int(u)) for u in range(1, leaves + 1)}
    for u in range(1, leaves + 1):
        for w in rng.choice(pool, others, replace=False):
            pairs.add((u, int(w)))
    return np.array(sorted(pairs), dtype=np.int64).T


def _mutual_selection(pairs: np.ndarray, priority: np.ndarray, d: int) -> np.ndarray:
    """GAP's rule with *given* per-edge priorities (the coupling: the same priority for
    the same edge in G and G - v): keep an edge if both endpoints rank it in their first D.
    Returns both directions."""
    m = pairs.shape[1]
    chosen = _select(np.concatenate([pairs[0], pairs[1]]),
                     np.concatenate([priority, priority]), d)
    keep = chosen[:m] & chosen[m:]
    s, t = pairs[0][keep], pairs[1][keep]
    return np.stack([np.concatenate([s, t]), np.concatenate([t, s])])


def _agg(x: torch.Tensor, ei: np.ndarray) -> torch.Tensor:
    adj = aggregation_matrix(torch.from_numpy(np.ascontiguousarray(ei)), x.shape[0])
    return torch.sparse.mm(adj, row_normalise(x))


def test_gap_edge_sampler_is_not_stable_under_node_removal() -> None:
    """The hub example: 300 neighbours of degree 6 at D = 5. Under the same edge priorities
    (coupled), removing the hub changes ~hundreds of kept edges not incident to it, and the
    aggregation moves far beyond any bound in D, even beyond sqrt(D^2 + D)."""
    d = 5
    pairs = _hub()
    n = int(pairs.max()) + 1
    worst_moved, worst_changed = 0.0, 0
    for seed in range(3):
        priority = np.random.default_rng(seed).permutation(pairs.shape[1]).astype(np.int64)
        full = _mutual_selection(pairs, priority, d)
        keep = (pairs[0] != 0) & (pairs[1] != 0)
        cut = _mutual_selection(pairs[:, keep], priority[keep], d)
        not_hub = lambda e: {(int(a), int(b)) for a, b in e.T if a != 0 and b != 0}  # noqa: E731
        worst_changed = max(worst_changed, len(not_hub(full) ^ not_hub(cut)) // 2)
        x = torch.ones(n, 4)
        worst_moved = max(worst_moved, float((_agg(x, full) - _agg(x, cut)).norm()))
    assert worst_changed > 100
    assert worst_moved > 3 * sensitivity("node", d, directed=False)
    # what GAP-NDP does instead: refuse the hub graph (naming D, not its degree 300)
    und = np.concatenate([pairs, pairs[::-1]], 1)
    with pytest.raises(DataError, match="exceeds it") as err:
        check_degree_bound(und, n, d, directed=False)
    assert err.value.field == "max_degree" and err.value.value == d


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("c", [None, 1.0])
def test_coupling_on_graphs_within_the_bound(directed: bool, c: float | None) -> None:
    """Graphs that pass the check (a star at D, random bounded graphs, the hub graph bounded
    by GAP's sampler and then treated as the input): removing any node moves the
    aggregation, with no substitute edge anywhere, by at most Δ."""
    from dpgnn_core.methods.gap import clip_rows

    d = 6
    rng = np.random.default_rng(1)
    graphs = []
    pairs = _hub(leaves=40)
    n = int(pairs.max()) + 1
    und = np.concatenate([pairs, pairs[::-1]], 1)
    graphs.append(bound_degree(und if not directed else pairs, n, d, directed=directed,
                               rng=rng))
    leaves = np.arange(1, d + 1)
    star = np.stack([leaves, np.zeros(d, dtype=np.int64)])
    graphs.append(star if directed else np.concatenate([star, star[::-1]], 1))
    bound = sensitivity("node", d, directed, c)
    for ei in graphs:
        m = int(ei.max()) + 1
        check_degree_bound(ei, m, d, directed=directed)
        assert max_degree_for_pma(ei, m, directed=directed) <= d
        for x in (torch.ones(m, 3), torch.randn(m, 3, generator=torch.Generator().manual_seed(0))):
            full = clip_rows(_agg(x, ei), c)
            for v in np.unique(ei):
                cut = ei[:, (ei[0] != v) & (ei[1] != v)]
                moved = float((full - clip_rows(_agg(x, cut), c)).norm())
                assert moved <= bound + 1e-5


@pytest.mark.parametrize("directed", [False, True])
def test_bound_degree_graph_passes_gaps_check(directed: bool) -> None:
    """GAP's edge sampler (bound_degree) and GAP's check read degrees the same way: a graph
    bounded at D passes the check at D."""
    pairs = _hub(leaves=60)
    n = int(pairs.max()) + 1
    ei = pairs if directed else np.concatenate([pairs, pairs[::-1]], 1)
    out = bound_degree(ei, n, 4, directed=directed, rng=np.random.default_rng(0))
    assert max_degree_for_pma(out, n, directed=directed) <= 4
    check_degree_bound(out, n, 4, directed=directed)


def test_degree_reading() -> None:
    ei = np.array([[0, 0, 1], [1, 2, 0]])  # 0 -> 1, 0 -> 2, 1 -> 0
    assert max_degree_for_pma(ei, 3, directed=True) == 3  # node 0: out 2 + in 1
    assert max_degree_for_pma(ei, 3, directed=False) == 2  # max(d_in, d_out)
    assert max_degree_for_pma(np.zeros((2, 0), dtype=np.int64), 3, directed=False) == 0
    with pytest.raises(DataError, match="integer >= 1"):
        check_degree_bound(ei, 3, 0, directed=False)


@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize(("d", "leaves"), [(5, 6), (5, 300), (7, 8), (40, 1234)])
def test_refusal_names_no_degree_beyond_d(directed: bool, d: int, leaves: int) -> None:
    """The refusal releases the bit "some degree > D" and nothing more: on stars whose
    centre exceeds D by 1 up to by far, its text holds no number but D (no maximum degree,
    no excess, no node id) and its value is D; the same text whatever the graph."""
    texts = set()
    for centre in (0, leaves // 2):  # which node is the hub must not show either
        others = np.array([u for u in range(leaves + 1) if u != centre], dtype=np.int64)
        star = np.stack([others, np.full_like(others, centre)])
        ei = star if directed else np.concatenate([star, star[::-1]], 1)
        assert max_degree_for_pma(ei, leaves + 1, directed=directed) > d
        with pytest.raises(DataError) as err:
            check_degree_bound(ei, leaves + 1, d, directed=directed)
        assert set(re.findall(r"\d+", str(err.value))) == {str(d)}, str(err.value)
        assert err.value.field == "max_degree" and err.value.value == d
        texts.add(str(err.value))
    assert len(texts) == 1
