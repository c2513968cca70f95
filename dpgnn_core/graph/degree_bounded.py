"""DP-GNN's degree-bounded subgraphs (Daigavane et al., Alg. 1-3).

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

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpgnn_core.errors import DataError
from dpgnn_core.graph._csr import csr, expand
from dpgnn_core.graph.subgraphs import Subgraphs
from dpgnn_core.privacy.events import neighbourhood_size

IntArray = npt.NDArray[np.int64]

#: The batch-sampling scheme DP-GNN's accountant assumes for these subgraphs.
SAMPLING_SCHEME = "fixed_size_without_replacement"


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


def sample_edgelists(edge_index: IntArray, num_nodes: int, train_mask: npt.NDArray[np.bool_],
                     max_degree: int, rng: np.random.Generator) -> SampledEdges:
    """SAMPLE-EDGELISTS: bound every node's in-degree by ``max_degree`` (module docstring).

    Args:
        edge_index (np.ndarray): directed edges ``[2, E]`` (both directions if undirected).
        num_nodes (int): number of nodes.
        train_mask (np.ndarray): boolean mask of training nodes.
        max_degree (int): K.
        rng (np.random.Generator): the source of randomness.
    """
    _check(max_degree, 0, train_mask)
    src, dst = edge_index[0], edge_index[1]
    cand = train_mask[src] & train_mask[dst] & (src != dst)
    src, dst = src[cand], dst[cand]
    deg = np.bincount(dst, minlength=num_nodes)
    p = np.minimum(1.0, max_degree / (2.0 * np.maximum(deg[dst], 1)))
    keep = rng.random(src.shape[0]) < p
    src, dst = src[keep], dst[keep]
    kept_deg = np.bincount(dst, minlength=num_nodes)
    over = kept_deg > max_degree
    if over.any():
        stay = ~over[dst] & ~over[src]
        src, dst = src[stay], dst[stay]
    order = np.lexsort((dst, src))
    return SampledEdges(np.stack([src[order], dst[order]]).astype(np.int64),
                        np.flatnonzero(over).astype(np.int64), int(cand.sum()))


def sample_subgraphs(sampled: SampledEdges, num_nodes: int, train_mask: npt.NDArray[np.bool_],
                     layers: int, max_degree: int) -> Subgraphs:
    """SAMPLE-SUBGRAPHS: the r-hop out-ball of every training node over sampled edges.

    A training node without sampled out-edges (isolated, or dropped) gets a subgraph of one
    node: itself.
    """
    _check(max_degree, layers, train_mask)
    roots = np.flatnonzero(train_mask).astype(np.int64)
    n = np.int64(num_nodes)
    indptr, indices = csr(sampled.edge_index[0], sampled.edge_index[1], num_nodes)
    # (subgraph, node, hop) for every path of length <= r; the frontier of each hop is
    # deduplicated, and a node reached at several hops keeps its first (smallest) hop.
    sids = [np.arange(roots.shape[0], dtype=np.int64)]
    members, hops = [roots], [np.zeros(roots.shape[0], np.int64)]
    f_sid, f_node = sids[0], roots
    for hop in range(1, layers + 1):
        o, v = expand(indptr, indices, f_sid, f_node)
        if 1 < hop < layers and o.shape[0]:  # dedupe only a frontier that grows further
            keys = np.unique(o * n + v)
            o, v = keys // n, keys % n
        sids.append(o)
        members.append(v)
        hops.append(np.full(o.shape[0], hop, np.int64))
        f_sid, f_node = o, v
    sid = np.concatenate(sids)
    mem = np.concatenate(members)
    hop_arr = np.concatenate(hops)
    # Sort by (subgraph, node, hop) with one int64 key and keep the first hop of each
    # (subgraph, node); then move each root to the front of its subgraph.
    span = np.int64(layers + 1)
    key = (sid * n + mem) * span + hop_arr
    order = np.argsort(key)
    key = key[order]
    pair = key // span
    first = np.r_[True, pair[1:] != pair[:-1]] if pair.shape[0] else np.zeros(0, bool)
    pair, hop_arr = pair[first], key[first] % span
    sid, mem = pair // n, pair % n
    front = np.argsort(sid * (n + 1) + np.where(hop_arr == 0, 0, mem + 1))
    sid, mem, hop_arr = sid[front], mem[front], hop_arr[front]
    counts = np.bincount(sid, minlength=roots.shape[0])
    offsets = np.zeros(roots.shape[0] + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])

    # Message edges: sampled edge a -> b with a at hop < r and b in the same subgraph, sent
    # from b to a (towards the root).
    if layers > 0:
        inner = hop_arr < layers
        e_owner, e_b = expand(indptr, indices, sid[inner], mem[inner])
        e_a = np.repeat(mem[inner], indptr[mem[inner] + 1] - indptr[mem[inner]])
        member_keys = np.sort(sid * n + mem)  # unique after the first-hop pass
        probe = e_owner * n + e_b
        at = np.minimum(np.searchsorted(member_keys, probe), member_keys.shape[0] - 1)
        ok = member_keys[at] == probe
        e_owner, e_a, e_b = e_owner[ok], e_a[ok], e_b[ok]
        eorder = np.lexsort((e_a, e_b, e_owner))
        e_owner, e_a, e_b = e_owner[eorder], e_a[eorder], e_b[eorder]
    else:
        e_owner = e_a = e_b = np.zeros(0, np.int64)
    ecounts = np.bincount(e_owner, minlength=roots.shape[0])
    eoffsets = np.zeros(roots.shape[0] + 1, np.int64)
    np.cumsum(ecounts, out=eoffsets[1:])
    return Subgraphs(roots=roots, offsets=offsets, nodes=mem.astype(np.int64),
                     edge_offsets=eoffsets, edges=np.stack([e_b, e_a]).astype(np.int64),
                     occurrence_bound=neighbourhood_size(max_degree, layers),
                     sampling_scheme=SAMPLING_SCHEME)
