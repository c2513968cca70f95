"""DP-GNN's and DRW's released gradient sums over training subgraphs: how many subgraphs
one neighbouring change touches, brute-forced on the real samplers.

Both clip each training subgraph's gradient to C, so a subgraph that changes (its nodes or
edges differ, or it holds the replaced node, whose features and label differ) moves the
sum by at most 2C (replace-one: its clipped gradient may turn to the opposite one), and
the clipped sum over all training subgraphs moves by at most 2C·M with M the most
subgraphs one change touches: DP-GNN's :func:`~dpgnn_core.methods.dp_gnn.
marked_subgraphs` (N(K,r) with the structure public, 2N(K,r) - 1 when a directed node's
own edge list is replaced too), DRW's 1 (a disjoint partition, structure public). The
brute force samples both graphs with the same uniform per edge (a coupling of the two
runs: :class:`PairUniforms`), counts the changed subgraphs, and reports 2C times that
count, the change of a worst-case gradient per subgraph (the clipping itself is the rows
check's, :mod:`.rows`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpgnn_core.graph.dpgnn_sampler import SampledEdges, sample_edgelists, sample_subgraphs
from dpgnn_core.graph.random_walk import drw
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck

CLIP = 0.7
#: Coupled draws of the tree (each edge is kept with probability 1/2 at in-degree K).
DRAWS = 300


class PairUniforms:
    """A stand-in generator whose uniforms are a fixed hash of each (src, dst) pair, so two
    graphs that share an edge share its draw. Valid for graphs without self-loops whose
    nodes are all training nodes (every edge is then a candidate, in column order)."""

    def __init__(self, edge_index: np.ndarray, salt: int) -> None:
        h = (edge_index[0].astype(np.uint64) * np.uint64(1_000_003)
             + edge_index[1].astype(np.uint64)) * np.uint64(2_654_435_761) + np.uint64(salt)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        self.u = ((h % np.uint64(2**24)).astype(np.float64) / 2**24).astype(np.float32)

    def random(self, n: int, dtype: Any = np.float64) -> np.ndarray:
        """The n uniforms of the edges, in column order."""
        if n != self.u.shape[0]:
            raise ValueError(f"{n} uniforms asked for {self.u.shape[0]} edges")
        out: np.ndarray = self.u.astype(dtype)
        return out


def dpgnn_subgraphs(ei: np.ndarray, n: int, k: int, r: int, salt: int
                    ) -> tuple[list[set[int]], list[set[tuple[int, int]]]]:
    """Each training node's subgraph (its nodes, its edges) from DP-GNN's sampler, every
    node a training node, the edge draws coupled by ``salt``."""
    train = np.ones(n, dtype=bool)
    s = sample_edgelists(ei, n, train, k, PairUniforms(ei, salt))  # type: ignore[arg-type]
    sg = sample_subgraphs(SampledEdges(s.edge_index, s.dropped_nodes, s.candidate_edges), n,
                          train, r, k)
    nodes = [set(sg.nodes[sg.offsets[i]:sg.offsets[i + 1]].tolist()) for i in range(n)]
    edges = [set(map(tuple, sg.edges[:, sg.edge_offsets[i]:sg.edge_offsets[i + 1]].T.tolist()))
             for i in range(n)]
    return nodes, edges


def changed_subgraphs(ei_a: np.ndarray, ei_b: np.ndarray, n: int, v: int, k: int, r: int,
                      salt: int) -> int:
    """The training subgraphs that differ between graphs a and b (same draws), or hold v."""
    na, ea = dpgnn_subgraphs(ei_a, n, k, r, salt)
    nb, eb = dpgnn_subgraphs(ei_b, n, k, r, salt)
    return sum(1 for i in range(n)
               if na[i] != nb[i] or ea[i] != eb[i] or v in na[i] or v in nb[i])


def replace_in_row(ei: np.ndarray, v: int, new_sources: np.ndarray) -> np.ndarray:
    """Node level on a directed graph: v's own list (the sampler's edges into v) replaced."""
    keep = ei[:, ei[1] != v]
    new = np.stack([new_sources, np.full(new_sources.shape[0], v)])
    out: np.ndarray = np.concatenate([keep, new[:, new[0] != v]], axis=1)
    return out


def random_directed(rng: np.random.Generator, n: int, m: int) -> np.ndarray:
    """A random directed graph of about m edges, without self-loops or duplicates."""
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    pairs: np.ndarray = np.unique(np.stack([src, dst])[:, src != dst], axis=1)
    return pairs.astype(np.int64)


def fan_in(k: int, r: int) -> np.ndarray:
    """A full K-ary tree of depth r towards v = 0: every node has K in-edges from the level
    above (a root's subgraph follows its out-edges, and the sampler keeps at most K
    in-edges of a node), so 0 is in the subgraph of every node of the tree, N(K,r) of
    them, on the draws that keep every edge."""
    edges, frontier, nxt = [], [0], 1
    for _ in range(r):
        new = []
        for u in frontier:
            for _ in range(k):
                edges.append((nxt, u))  # nxt sends to u: u is in nxt's subgraph
                new.append(nxt)
                nxt += 1
        frontier = new
    return np.array(edges, dtype=np.int64).T.reshape(2, -1)


def _dpgnn_cases() -> Iterator[Case]:
    n = 30
    for k, r in ((2, 1), (3, 1), (2, 2)):
        rng = np.random.default_rng(k * 10 + r)
        graphs = [random_directed(rng, n, int(rng.integers(40, 120))) for _ in range(6)]
        # node_feature: the same graph, one node's features and label replaced
        tree = fan_in(k, r)
        worst = max(changed_subgraphs(tree, tree, int(tree.max()) + 1, 0, k, r, s)
                    for s in range(DRAWS))
        for ei in graphs[:2]:
            worst = max(worst, *(changed_subgraphs(ei, ei, n, v, k, r, 0) for v in range(n)))
        yield Case(f"every node of random directed graphs and a full in-tree, K={k} r={r}, "
                   "features and label replaced", {"level": "node_feature", "k": k, "r": r,
                                                   "clip": CLIP}, 2 * CLIP * worst,
                   tight=True)
        # node (directed): v's own edge list replaced too, adversarial new rows
        worst = 0
        for trial, ei in enumerate(graphs):
            v = int(rng.integers(n))
            for size in (0, k, 4 * k):
                new = rng.choice(np.delete(np.arange(n), v), size=size, replace=False)
                worst = max(worst, *(changed_subgraphs(ei, replace_in_row(ei, v, new), n, v,
                                                       k, r, salt + 10 * trial)
                                     for salt in range(2)))
        tight = r == 1  # the swapped fan-in below reaches 2N(K,1) - 1 on some draw
        if tight:
            worst = max(worst, swapped_fan_in(k))
        yield Case(f"random directed graphs{' and a swapped fan-in' if tight else ''}, K={k} "
                   f"r={r}, a node's features, label and own edge list replaced",
                   {"level": "node", "k": k, "r": r, "clip": CLIP}, 2 * CLIP * worst,
                   tight=tight)


def swapped_fan_in(k: int) -> int:
    """Node 0 receiving from nodes 1..K, its edge list replaced by K others (K+1..2K): the
    subgraphs holding 0 before or after are 0's own and those of 2K senders, 2N(K,1) - 1
    on the draws that keep every edge. The most changed subgraphs over the draws."""
    before = np.array([np.arange(1, k + 1), np.zeros(k, dtype=np.int64)])
    n = 2 * k + 1
    after = replace_in_row(before, 0, np.arange(k + 1, n))
    return max(changed_subgraphs(before, after, n, 0, k, 1, s) for s in range(DRAWS))


def dpgnn_check(marked: Callable[[str, int, int], int]) -> SensitivityCheck:
    """DP-GNN's clipped gradient sum over its training subgraphs: declared 2C·M, with
    ``marked(level, K, r)`` the M its module calibrates with."""
    def bound(level: str, k: int, r: int, clip: float) -> float:
        return 2.0 * clip * marked(level, k, r)
    return SensitivityCheck("DP-GNN's clipped gradient sum over training subgraphs "
                            "(replace one node: features and label, or its own edge list "
                            "too)", bound, _dpgnn_cases)


def _drw_cases(unit: float) -> Iterator[Case]:
    rng = np.random.default_rng(0)
    for restarts in (1, 2):
        worst = 0
        for trial in range(4):
            n = 40
            ei = random_directed(rng, n, 120)
            ei = np.concatenate([ei, ei[::-1]], 1)
            train = rng.random(n) < 0.8
            sg = drw(ei, n, train, 3, restarts=restarts, rng=trial)
            worst = max(worst, int(sg.occurrences(n).max()))
        yield Case(f"DRW partitions (restarts {restarts}) of random graphs, a node's features "
                   "and label replaced", {"clip": CLIP}, 2 * CLIP * worst, tight=True)


def drw_check(unit_sensitivity: float) -> SensitivityCheck:
    """DRW's clipped gradient sum over its disjoint walk subgraphs: declared
    ``unit_sensitivity`` · C (its module's 2: one replaced subgraph)."""
    return SensitivityCheck("DRW's clipped gradient sum over walk subgraphs (replace one "
                            "node's features and label; structure public)",
                            lambda clip: unit_sensitivity * clip,
                            lambda: _drw_cases(unit_sensitivity))


__all__ = ["PairUniforms", "changed_subgraphs", "dpgnn_check", "drw_check", "fan_in",
           "random_directed", "replace_in_row"]
