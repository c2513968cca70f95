"""Straightforward reference implementations (per-node Python loops), for benchmarks only.

They follow the same definitions as dpgnn_core.graph and serve as the peers that the
vectorised samplers are measured against.
"""

from __future__ import annotations

import random
from collections import defaultdict, deque

import numpy as np


def sample_edgelists_ref(edge_index: np.ndarray, train: np.ndarray, k: int, seed: int
                         ) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    incoming: dict[int, list[int]] = defaultdict(list)
    for u, v in edge_index.T.tolist():
        if train[u] and train[v] and u != v:
            incoming[v].append(u)
    kept: dict[int, list[int]] = {}
    for v, lst in incoming.items():
        p = min(1.0, k / (2 * len(lst)))
        kept[v] = [u for u in lst if rnd.random() < p]
    over = {v for v, lst in kept.items() if len(lst) > k}
    return [(u, v) for v, lst in kept.items() if v not in over for u in lst if u not in over]


def subgraphs_ref(edges: list[tuple[int, int]], roots: np.ndarray, r: int) -> list[list[int]]:
    out_adj: dict[int, list[int]] = defaultdict(list)
    for u, v in edges:
        out_adj[u].append(v)
    result = []
    for root in roots.tolist():
        seen = {root}
        frontier = [root]
        order = [root]
        for _ in range(r):
            nxt = []
            for a in frontier:
                for b in out_adj[a]:
                    if b not in seen:
                        seen.add(b)
                        nxt.append(b)
                        order.append(b)
            frontier = nxt
        result.append(order)
    return result


def drw_ref(edge_index: np.ndarray, train: np.ndarray, length: int, seed: int
            ) -> list[list[int]]:
    rnd = random.Random(seed)
    adj: dict[int, list[int]] = defaultdict(list)
    for u, v in edge_index.T.tolist():
        adj[u].append(v)
    nodes = [int(v) for v in np.flatnonzero(train)]
    rnd.shuffle(nodes)
    used: set[int] = set()
    parts = []
    for root in nodes:
        if root in used:
            continue
        used.add(root)
        walk = [root]
        cur = root
        for _ in range(length):
            cand = [w for w in adj[cur] if train[w] and w not in used]
            if not cand:
                break
            cur = rnd.choice(cand)
            used.add(cur)
            walk.append(cur)
        parts.append(walk)
    return parts


def degree_bound_ref(edge_index: np.ndarray, d: int, seed: int) -> list[tuple[int, int]]:
    rnd = random.Random(seed)
    pairs = [(u, v) for u, v in edge_index.T.tolist() if u < v]
    prio = {e: rnd.random() for e in pairs}
    inc: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in pairs:
        inc[e[0]].append(e)
        inc[e[1]].append(e)
    chosen: dict[int, set[tuple[int, int]]] = {
        v: set(sorted(lst, key=lambda e: -prio[e])[:d]) for v, lst in inc.items()}
    return [e for e in pairs if e in chosen[e[0]] and e in chosen[e[1]]]


__all__ = ["degree_bound_ref", "deque", "drw_ref", "sample_edgelists_ref", "subgraphs_ref"]
