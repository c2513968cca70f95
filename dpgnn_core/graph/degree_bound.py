"""GAP's degree bound for node-level PMA: keep a random subset of edges so that every node
has degree at most D (undirected degree for undirected graphs; in + out for directed ones).

The edges are put in a uniformly random order; every node selects its first D incident
edges in that order; an edge is kept when both its endpoints selected it. A node therefore keeps at
most D edges, every kept edge existed, and low-degree nodes keep all edges whose other
endpoint also selected them. Vectorised: one sort over (node, priority).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dpgnn_core.errors import DataError

IntArray = npt.NDArray[np.int64]


def _select(endpoint: IntArray, priority: IntArray, max_degree: int) -> npt.NDArray[np.bool_]:
    """For incidences (``endpoint``, ``priority`` a distinct rank per edge), whether each is
    among its node's D incidences of lowest rank. One argsort of int64 keys."""
    order = np.argsort(endpoint * np.int64(priority.max(initial=0) + 1) + priority)
    sorted_nodes = endpoint[order]
    starts = np.flatnonzero(np.r_[True, sorted_nodes[1:] != sorted_nodes[:-1]])
    group_start = np.repeat(starts, np.diff(np.r_[starts, sorted_nodes.shape[0]]))
    rank = np.arange(sorted_nodes.shape[0]) - group_start
    chosen = np.empty(endpoint.shape[0], dtype=bool)
    chosen[order] = rank < max_degree
    return chosen


def bound_degree(edge_index: IntArray, num_nodes: int, max_degree: int, *, directed: bool,
                 rng: np.random.Generator) -> IntArray:
    """Edges of a random subgraph with every degree <= ``max_degree``.

    Args:
        edge_index (np.ndarray): ``[2, E]``; an undirected graph holds both directions.
        num_nodes (int): number of nodes.
        max_degree (int): D >= 1.
        directed (bool): count in + out degree (else undirected degree).
        rng (np.random.Generator): the source of randomness.

    Returns:
        np.ndarray: the kept edges ``[2, E']`` (both directions for undirected graphs),
        sorted by (src, dst).
    """
    if int(max_degree) != max_degree or max_degree < 1:
        raise DataError("degree bound D must be an integer >= 1", field="max_degree",
                        value=max_degree)
    src, dst = edge_index[0], edge_index[1]
    if not directed:
        und = src < dst
        if (src == dst).any():
            raise DataError("self-loops present; remove them before bounding degrees",
                            field="src", value=int(src[src == dst][0]))
        src, dst = src[und], dst[und]
    if src.shape[0] == 0:
        return np.zeros((2, 0), dtype=np.int64)
    m = src.shape[0]
    priority = rng.permutation(m).astype(np.int64)  # a uniformly random order of the edges
    # Every edge is incident to both endpoints; rank each node over all its incidences.
    chosen = _select(np.concatenate([src, dst]), np.concatenate([priority, priority]),
                     max_degree)
    keep = chosen[:m] & chosen[m:]
    src, dst = src[keep], dst[keep]
    if not directed:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.lexsort((dst, src))
    return np.stack([src[order], dst[order]]).astype(np.int64)


def degrees(edge_index: IntArray, num_nodes: int, *, directed: bool) -> IntArray:
    """Degree of every node (in + out if directed; neighbours if undirected)."""
    if directed:
        out: IntArray = (np.bincount(edge_index[0], minlength=num_nodes)
                         + np.bincount(edge_index[1], minlength=num_nodes)).astype(np.int64)
        return out
    und: IntArray = np.bincount(edge_index[0], minlength=num_nodes).astype(np.int64)
    return und
