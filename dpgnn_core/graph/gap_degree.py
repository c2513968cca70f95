"""The degree check of node-level PMA, degrees, and GAP's old edge sampler.

:func:`check_degree_bound` is what GAP-NDP, ProGAP-NDP and DPDGC-NDP use: it applies no
projection and refuses a graph with a degree above D. Its node-level guarantee is stated
for graphs whose degrees are all within D (undirected degree, i.e. in- and out-degree
each, on a graph flagged undirected; in + out degree on one flagged directed); the refusal
itself reveals whether that holds, which the ledger lists as an unaccounted use.

:func:`bound_degree` is GAP's edge sampler (kept for the tests that show its defect and
the benchmarks; nothing in dpgnn trains on its output): the edges are put in a uniformly
random order; every node selects its first D incident edges in that order; an edge is kept
when both its endpoints selected it. It is **not** stable under node removal: removing a
node v frees a slot at every neighbour that had selected v's edge, and each such neighbour
may then keep an edge to a third node. A hub with 300 neighbours of degree 6 at D = 5
changes about 250 kept edges not incident to v, so an aggregation over its output moves by
far more than any bound in D. A graph bounded with it carries a node-level guarantee
relative to the *bounded* graph only, not the original one. Any rule in which one node's
edges decide which edges of another node survive has this defect; see docs/privacy.md.
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
    """Edges of a random subgraph with every degree <= ``max_degree`` (GAP's sampler; not
    stable under node removal, see the module docstring).

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


def in_out_degrees(edge_index: IntArray, num_nodes: int) -> tuple[IntArray, IntArray]:
    """In-degree (messages received, ``edge_index[1]``) and out-degree (``edge_index[0]``)
    of every node; a self-loop counts once in each."""
    d_in = np.bincount(edge_index[1], minlength=num_nodes).astype(np.int64)
    d_out = np.bincount(edge_index[0], minlength=num_nodes).astype(np.int64)
    return d_in, d_out


def max_degree_for_pma(edge_index: IntArray, num_nodes: int, *, directed: bool) -> int:
    """The largest degree that node-level PMA's sensitivity depends on: max over nodes of
    d_in + d_out if ``directed``, else of max(d_in, d_out) (the undirected degree when the
    edge list holds both directions, and still a valid bound when it does not)."""
    if edge_index.shape[1] == 0:
        return 0
    d_in, d_out = in_out_degrees(edge_index, num_nodes)
    per_node = d_in + d_out if directed else np.maximum(d_in, d_out)
    return int(per_node.max(initial=0))


def exceeds_degree_bound(edge_index: IntArray, num_nodes: int, max_degree: int, *,
                         directed: bool) -> bool:
    """Whether some node's degree (in + out on a graph flagged directed) is above D: the
    one bit the node-level methods' refusals reveal (GAP-NDP, ProGAP-NDP, DPDGC-NDP). It
    returns nothing else about the degrees.

    Raises:
        DataError: D is not an integer >= 1.
    """
    if int(max_degree) != max_degree or max_degree < 1:
        raise DataError("degree bound D must be an integer >= 1", field="max_degree",
                        value=max_degree)
    return max_degree_for_pma(edge_index, num_nodes, directed=directed) > max_degree


def check_degree_bound(edge_index: IntArray, num_nodes: int, max_degree: int, *,
                       directed: bool, method: str = "node-level GAP",
                       instead: str = "edge-level GAP") -> None:
    """Refuse a graph with a degree above ``max_degree``: the one degree check of the
    node-level methods (GAP-NDP, ProGAP-NDP, DPDGC-NDP), in training and in the pre-flight
    (:func:`dpgnn_core.specs.base.degree_within_bound`).

    No edge is removed: every projection onto degree <= D that keeps edges of low-degree
    nodes lets one node's removal change edges elsewhere (see the module docstring), so
    node-level PMA is only claimed on graphs already within the bound.

    The refusal releases one bit, "some degree exceeds D" (listed in the ledger's notes,
    not covered by ε), and nothing more: its message names D (the user's, public) but
    never the observed maximum degree, how far beyond D it is, or which node exceeds it,
    and nothing data-dependent is returned.

    Args:
        edge_index (np.ndarray): ``[2, E]`` (src -> dst).
        num_nodes (int): number of nodes.
        max_degree (int): D >= 1.
        directed (bool): the manifest flag: bound d_in + d_out (else max(d_in, d_out)).
        method (str, optional): what the message says is claimed only within the bound.
            (default: ``"node-level GAP"``)
        instead (str, optional): what the message offers instead of a larger D.
            (default: ``"edge-level GAP"``)

    Raises:
        DataError: D is not an integer >= 1, or some node's degree exceeds D (names the
            field ``max_degree`` and the user's D, not the graph's degrees).
    """
    if exceeds_degree_bound(edge_index, num_nodes, max_degree, directed=directed):
        kind = "in + out degree" if directed else "degree"
        raise DataError(
            f"{method} is claimed only for graphs whose every {kind} is at most D = "
            f"{max_degree}, and some node's {kind} in this graph exceeds it (by how much, "
            "and which node, is not said: the degrees are private); choose a larger D from "
            f"public knowledge (the noise grows with D) or use {instead}. No edge is "
            "dropped to enforce the bound: dropping edges to bound degrees is not stable "
            "under node removal (docs/privacy.md)", field="max_degree", value=max_degree)
