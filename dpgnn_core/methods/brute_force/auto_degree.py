"""Brute force of ``dpgnn run auto``'s noisy statistic: the edge count m released by
:mod:`dpgnn_core.methods.auto_statistic`, on small adversarial graphs and their
neighbours, against its declared sensitivity (:func:`~dpgnn_core.methods.auto_statistic.
edge_count_sensitivity`): at node level a node removed with its edges (stars at the bound
D: tight; random graphs within D, directed with in + out <= D and undirected), at
k-neighbour level up to k of a node's edges removed (tight)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations

import numpy as np

from dpgnn_core.methods.auto_statistic import edge_count, edge_count_sensitivity
from dpgnn_core.methods.brute_force.graphs import random_bounded, removed, star
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck


def _change(a: np.ndarray, b: np.ndarray, directed: bool) -> float:
    return float(abs(edge_count(a, directed) - edge_count(b, directed)))


def _node_cases() -> Iterator[Case]:
    for d in (1, 3, 6):
        for directed in (False, True):
            ei = star(d, directed)
            yield Case(f"star D={d}, hub removed, directed={directed}",
                       {"level": "node", "max_degree": d},
                       _change(ei, removed(ei, 0), directed), tight=True)
            for seed in range(3):  # input graphs, not noise
                g = random_bounded(12, d, seed, directed)
                worst = max(_change(g, removed(g, v), directed) for v in range(12))
                yield Case(f"random graph within D={d}, seed {seed}, directed={directed}, "
                           "every node removed", {"level": "node", "max_degree": d}, worst)


def _without_edges(ei: np.ndarray, pairs: list[tuple[int, int]], directed: bool
                   ) -> np.ndarray:
    """``ei`` without the given edges (both directions on an undirected graph)."""
    keep = np.ones(ei.shape[1], dtype=bool)
    for u, w in pairs:
        keep &= ~((ei[0] == u) & (ei[1] == w))
        if not directed:
            keep &= ~((ei[0] == w) & (ei[1] == u))
    out: np.ndarray = ei[:, keep]
    return out


def _k_cases() -> Iterator[Case]:
    for k in (1, 2, 3):
        for directed in (False, True):
            ei = star(5, directed)
            mine = [(int(s), int(t)) for s, t in ei.T if 0 in (s, t)]
            if not directed:
                mine = [(s, t) for s, t in mine if s < t]
            worst = max(_change(ei, _without_edges(ei, list(c), directed), directed)
                        for c in combinations(mine, k))
            yield Case(f"star of 5, any {k} of the hub's edges removed, directed={directed}",
                       {"level": "k_neighbor", "k": k}, worst, tight=True)


def _sensitivity(level: str, max_degree: int | None = None, k: int | None = None
                 ) -> float:
    return edge_count_sensitivity(level, max_degree=max_degree, k=k)


#: The two checks: the edge count at node level and at k-neighbour level.
CHECKS = (
    SensitivityCheck("dpgnn run auto: the edge count behind the noisy mean degree, node "
                     "level (a node with its <= D edges), add/remove", _sensitivity,
                     lambda: list(_node_cases())),
    SensitivityCheck("dpgnn run auto: the edge count behind the noisy mean degree, "
                     "k-neighbour level (up to k edges), add/remove", _sensitivity,
                     lambda: list(_k_cases())),
)

__all__ = ["CHECKS"]
