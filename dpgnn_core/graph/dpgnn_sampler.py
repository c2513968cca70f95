"""DP-GNN's subgraph sampler: SAMPLE-EDGELISTS and SAMPLE-SUBGRAPHS (Daigavane et al.,
Alg. 1-3), which build the degree-bounded training subgraphs. Which subgraphs form a batch
at each step is the job of the *batch sampler*,
:class:`~dpgnn_core.training.dp_sgd.FixedSizeSampler`.

What is implemented, exactly:

* SAMPLE-EDGELISTS. The edge list of node v is RE_v, its incoming edges u -> v with both u
  and v training nodes and u != v. Each is kept independently with probability
  min(1, K / (2 |RE_v|)). A node whose kept in-degree still exceeds K is dropped from all
  edge lists: its own list is emptied and it is removed from every other list. Every node
  of the result has in-degree <= K.
* RECURSIVE-NEIGHBORHOOD / SAMPLE-SUBGRAPHS. The subgraph of training node v is v with every
  node it reaches within r hops along sampled edges (its r-hop out-ball). A node w is in
  v's subgraph only if v lies in w's r-hop in-ball, which holds at most
  N(K, r) = sum_{i=0..r} K^i nodes: every node occurs in at most N(K, r) training subgraphs.
  Messages inside a subgraph flow along the reversed sampled edges (from w towards v); on an
  undirected graph (both directions stored) every such edge is an edge of the graph. For a
  directed graph, pass the reversed edge index, so that messages follow real edges.
* Only training subgraphs are bounded; evaluation uses the full graph (transductive) or the
  test graph (inductive).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from dpgnn_core.errors import DataError
from dpgnn_core.graph._csr import csr
from dpgnn_core.graph.subgraphs import Subgraphs
from dpgnn_core.privacy.events import neighbourhood_size

IntArray = npt.NDArray[np.int64]

#: The batch-sampling scheme DP-GNN's accountant assumes for these subgraphs.
SAMPLING_SCHEME = "fixed_size_without_replacement"

#: Progress callback: (stage name, done, total).
Progress = Callable[[str, int, int], None]

#: How many calls of the breadth-first kernel one pass is split into when progress is
#: followed (the kernel cannot call back; results are the same however it is split).
PROGRESS_CHUNKS = 20


@dataclass(frozen=True)
class SampledEdges:
    """Result of SAMPLE-EDGELISTS.

    Attributes:
        edge_index (np.ndarray): kept edges ``[2, E']`` (u -> v: v kept u in its list),
            sorted by (src, dst).
        dropped_nodes (np.ndarray): nodes removed for exceeding K after sampling.
        candidate_edges (int): size of the union of the lists RE_v before sampling.
    """

    edge_index: IntArray
    dropped_nodes: IntArray
    candidate_edges: int


def _check(max_degree: int, layers: int, train_mask: npt.NDArray[np.bool_]) -> None:
    if int(max_degree) != max_degree or max_degree < 1:
        raise DataError("max degree K must be an integer >= 1", field="max_degree",
                        value=max_degree)
    if int(layers) != layers or layers < 0:
        raise DataError("layers r must be an integer >= 0", field="layers", value=layers)
    if not train_mask.any():
        raise DataError("the training set is empty: no subgraph to sample", field="split",
                        value="train")


def candidates(src: IntArray, dst: IntArray, train_src: npt.NDArray[np.bool_] | None,
               train_dst: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.bool_]:
    """Which edges are candidates of SAMPLE-EDGELISTS: no self-loop, both ends training
    nodes (``train_src`` / ``train_dst``: the training flags of each edge's ends;
    :obj:`None` when every node trains)."""
    cand: npt.NDArray[np.bool_] = src != dst
    if train_src is not None and train_dst is not None:
        cand &= train_src & train_dst
    return cand


def thin_edgelists(dst: IntArray, num_nodes: int, max_degree: int,
                   uniforms: npt.NDArray[np.float32]
                   ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """The sampling of SAMPLE-EDGELISTS on candidate edges with destinations ``dst`` in
    ``[0, num_nodes)``: each kept when its uniform (float32, one per edge, secret) is below
    min(1, K / (2 |RE_v|)) of its destination v, and which nodes' kept in-degree exceeds K.
    Everything here depends on the destination's own edge list only, so a destination
    partition computes it for its nodes alone (``dst`` local to the partition)
    (:mod:`dpgnn_core.distributed.sampling`).

    Returns:
        tuple: (kept mask per edge, over-K mask per node).
    """
    deg = np.bincount(dst, minlength=num_nodes)
    # Keep probability per node, compared with float32 uniforms (one per candidate edge).
    p_node = np.minimum(1.0, max_degree / (2.0 * np.maximum(deg, 1))).astype(np.float32)
    keep: npt.NDArray[np.bool_] = uniforms < p_node[dst]
    over: npt.NDArray[np.bool_] = np.bincount(dst[keep], minlength=num_nodes) > max_degree
    return keep, over


def sample_edgelists(edge_index: IntArray, num_nodes: int, train_mask: npt.NDArray[np.bool_],
                     max_degree: int, rng: np.random.Generator,
                     progress: Progress | None = None) -> SampledEdges:
    """SAMPLE-EDGELISTS: bound every node's in-degree by ``max_degree`` (module docstring).

    Args:
        edge_index (np.ndarray): directed edges ``[2, E]`` (both directions if undirected).
        num_nodes (int): number of nodes.
        train_mask (np.ndarray): boolean mask of training nodes.
        max_degree (int): K.
        rng (np.random.Generator): the source of randomness.
        progress (callable, optional): called ``("sampling edge lists", done, 1)`` at the
            start and the end. (default: :obj:`None`)
    """
    _check(max_degree, 0, train_mask)
    if progress is not None:
        progress("sampling edge lists", 0, 1)
    src, dst = edge_index[0], edge_index[1]
    cand = candidates(src, dst, train_mask[src] if not train_mask.all() else None,
                      train_mask[dst] if not train_mask.all() else None)
    if not cand.all():
        src, dst = src[cand], dst[cand]
    keep, over = thin_edgelists(dst, num_nodes, max_degree,
                                rng.random(src.shape[0], dtype=np.float32))
    src, dst = src[keep], dst[keep]
    if over.any():
        stay = ~over[dst] & ~over[src]
        src, dst = src[stay], dst[stay]
    order = np.lexsort((dst, src))
    out = SampledEdges(np.stack([src[order], dst[order]]).astype(np.int64),
                       np.flatnonzero(over).astype(np.int64), int(np.count_nonzero(cand)))
    if progress is not None:
        progress("sampling edge lists", 1, 1)
    return out


@numba.njit(cache=True)
def _balls(indptr: IntArray, indices: IntArray, roots: IntArray, layers: int,
           stamp: IntArray, stamp_base: int, fill: bool, offsets: IntArray,
           eoffsets: IntArray, nodes: IntArray, esrc: IntArray, edst: IntArray
           ) -> tuple[IntArray, IntArray]:
    """Breadth-first r-hop out-ball of every root. First pass (``fill`` false) counts nodes
    and message edges per root; second pass writes them. ``stamp[v] == stamp_base + i``
    marks v as seen for root i, so nothing is reset between roots."""
    sizes = np.zeros(roots.shape[0], np.int64)
    esizes = np.zeros(roots.shape[0], np.int64)
    queue = np.empty(stamp.shape[0], np.int64)
    for i in range(roots.shape[0]):
        mark = stamp_base + i
        root = roots[i]
        stamp[root] = mark
        queue[0] = root
        head, tail, ecount = 0, 1, 0
        for _hop in range(layers):
            level_end = tail
            if head == level_end:
                break
            while head < level_end:
                a = queue[head]
                head += 1
                for j in range(indptr[a], indptr[a + 1]):
                    b = indices[j]
                    if fill:  # sampled a -> b: the message runs b -> a
                        esrc[eoffsets[i] + ecount] = b
                        edst[eoffsets[i] + ecount] = a
                    ecount += 1
                    if stamp[b] != mark:
                        stamp[b] = mark
                        queue[tail] = b
                        tail += 1
        if fill:
            nodes[offsets[i]:offsets[i] + tail] = queue[:tail]
        sizes[i] = tail
        esizes[i] = ecount
    return sizes, esizes


def sample_subgraphs(sampled: SampledEdges, num_nodes: int, train_mask: npt.NDArray[np.bool_],
                     layers: int, max_degree: int, progress: Progress | None = None
                     ) -> Subgraphs:
    """SAMPLE-SUBGRAPHS: the r-hop out-ball of every training node over sampled edges.

    Nodes are listed in breadth-first order from the root (root first); message edges are
    the sampled edges leaving nodes closer than r hops, reversed. A training node without
    sampled out-edges (isolated, or dropped) gets a subgraph of one node: itself. A numba
    kernel, linear in the output (the breadth-first search is sequential per root).

    ``progress``, if given, is called ``("building subgraphs", done, 2 S)`` as the two
    passes (count, then fill) over the S roots advance.
    """
    _check(max_degree, layers, train_mask)
    roots = np.flatnonzero(train_mask).astype(np.int64)
    n_roots = int(roots.shape[0])
    indptr, indices = csr(sampled.edge_index[0], sampled.edge_index[1], num_nodes)
    stamp = np.full(num_nodes, -1, np.int64)
    empty = np.zeros(0, np.int64)
    # Chunks of roots: one kernel call each (a single call without progress). Stamps stay
    # unique per root and pass (stamp_base + position), as in one call.
    step = n_roots if progress is None else max(1, -(-n_roots // PROGRESS_CHUNKS))
    chunks = [(a, min(a + step, n_roots)) for a in range(0, n_roots, step)]

    def report(done: int) -> None:
        if progress is not None:
            progress("building subgraphs", done, 2 * n_roots)

    report(0)
    parts = []
    for a, b in chunks:
        parts.append(_balls(indptr, indices, roots[a:b], int(layers), stamp, a, False, empty,
                            empty, empty, empty, empty))
        report(b)
    sizes = np.concatenate([p[0] for p in parts])
    esizes = np.concatenate([p[1] for p in parts])
    offsets = np.zeros(roots.shape[0] + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    eoffsets = np.zeros(roots.shape[0] + 1, np.int64)
    np.cumsum(esizes, out=eoffsets[1:])
    nodes = np.empty(int(offsets[-1]), np.int64)
    esrc = np.empty(int(eoffsets[-1]), np.int64)
    edst = np.empty(int(eoffsets[-1]), np.int64)
    for a, b in chunks:
        _balls(indptr, indices, roots[a:b], int(layers), stamp, n_roots + a, True,
               offsets[a:b + 1], eoffsets[a:b + 1], nodes, esrc, edst)
        report(n_roots + b)
    return Subgraphs(roots=roots, offsets=offsets, nodes=nodes, edge_offsets=eoffsets,
                     edges=np.stack([esrc, edst]), occurrence_bound=neighbourhood_size(
                         max_degree, layers), sampling_scheme=SAMPLING_SCHEME)
