"""Small adversarial graphs and neighbouring changes for the brute-force checks: stars
(a hub at the degree bound), random graphs within a degree bound, a node removed with its
edges. Edge lists are ``[2, E]`` int64 arrays, src -> dst, both directions for an
undirected graph."""

from __future__ import annotations

import numpy as np


def star(d: int, directed: bool = False) -> np.ndarray:
    """Hub 0 with leaves 1..d (both directions unless ``directed``: leaves -> hub)."""
    leaves = np.arange(1, d + 1)
    ei = np.stack([leaves, np.zeros(d, dtype=np.int64)])
    return ei if directed else np.concatenate([ei, ei[::-1]], 1)


def random_bounded(n: int, d: int, seed: int, directed: bool) -> np.ndarray:
    """A random graph with max(d_in, d_out) <= d (undirected, symmetric) or in + out <= d
    (directed)."""
    rng = np.random.default_rng(seed)
    deg = np.zeros(n, dtype=np.int64)
    edges: set[tuple[int, int]] = set()
    for _ in range(n * d * 4):
        u, w = (int(a) for a in rng.integers(0, n, 2))
        if u == w or (u, w) in edges or (not directed and (w, u) in edges):
            continue
        if deg[u] + 1 > d or deg[w] + 1 > d:  # one incidence at each endpoint
            continue
        edges.add((u, w))
        deg[u] += 1
        deg[w] += 1
    arr = np.array(sorted(edges), dtype=np.int64).T.reshape(2, -1)
    return arr if directed else np.concatenate([arr, arr[::-1]], 1)


def removed(ei: np.ndarray, v: int) -> np.ndarray:
    """The graph without node v's edges (v isolated: its aggregation row is then 0), the
    node-level add/remove neighbour as the aggregations see it."""
    out: np.ndarray = ei[:, (ei[0] != v) & (ei[1] != v)]
    return out


__all__ = ["random_bounded", "removed", "star"]
