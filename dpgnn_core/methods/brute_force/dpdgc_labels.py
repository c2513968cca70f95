"""DPDGC's first hop of label messages, :math:`\\mathrm{clip}_c(A W_1)` with W_1 the
training nodes' one-hot labels (divided by √(out-degree) at k-neighbour and
``node_feature`` level), through the library's own path
(:func:`~dpgnn_core.methods.dpdgc_messages.first_messages`,
:func:`~dpgnn_core.methods.dpdgc_messages.propagate` without noise), over every
neighbouring pair of small adversarial graphs (random graphs, stars at the degree bound, a
star with isolated nodes, the empty graph; in-, out- and mixed stars when directed) and
labellings (aligned, mixed, a part of the nodes in training), at each level's relation.
The declared sensitivity is :func:`~dpgnn_core.methods.dpdgc_messages.label_sensitivity`;
it is reached at edge, node (c = ∞) and ``node_feature`` level; the k-neighbour bound is a
triangle bound that the search reaches a good part of."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import torch

from dpgnn_core.methods.dpdgc_messages import first_messages, label_rows, propagate
from dpgnn_core.privacy.pma import aggregation_matrix
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck

Edges = frozenset[tuple[int, int]]
Neighbour = tuple[Edges, torch.Tensor]
Pairs = Callable[[Edges, torch.Tensor, bool], Iterator[Neighbour]]
N, CLASSES = 6, 3


@functools.lru_cache(maxsize=4096)
def _adjacency(edges: Edges, n: int) -> torch.Tensor:
    """The library's aggregation matrix of a graph in float64 (read-only here; cached: the
    search visits each graph under several labellings)."""
    if not edges:
        return torch.zeros(n, n, dtype=torch.float64).to_sparse_csr()
    ei = torch.tensor(sorted(edges), dtype=torch.int64).T.contiguous()
    return aggregation_matrix(ei, n).to(torch.float64)


def hop1(level: str, edges: Edges, y: torch.Tensor, train: torch.Tensor,
         c: float | None) -> torch.Tensor:
    """The pre-noise first hop of label messages, through the library's path."""
    adj_t = _adjacency(edges, len(y))
    w1 = first_messages(level, label_rows(y, train, CLASSES).double(), adj_t)
    out: torch.Tensor = propagate(adj_t, w1, [0.0], c, None)[:, 0]
    return out


def _sym(edges: set[tuple[int, int]]) -> Edges:
    return frozenset(edges | {(b, a) for a, b in edges})


def _within(edges: Edges, d: int, directed: bool) -> bool:
    deg = np.zeros(N, np.int64)
    for a, b in edges:
        deg[b] += 1
        if directed:
            deg[a] += 1
    return bool(deg.max(initial=0) <= d)


def graphs(directed: bool, max_degree: int | None = None) -> list[Edges]:
    """Random graphs, a star whose hub has the maximum degree, a star with isolated nodes,
    the empty graph (in-, out- and a mixed star when directed); those within the degree
    bound (in + out if directed) when ``max_degree``."""
    rng = np.random.default_rng(0)
    out: list[Edges] = []
    for p in (0.3, 0.6):
        pairs = {(a, b) for a in range(N) for b in range(N) if a != b and rng.random() < p}
        out.append(frozenset(pairs) if directed else _sym({(a, b) for a, b in pairs
                                                              if a < b}))
    d = max_degree if max_degree is not None else N - 1
    star = {(i, 0) for i in range(1, d + 1)}
    out += [_sym(star), _sym({(i, 0) for i in range(1, 3)}), frozenset()]
    if directed:  # in-star, out-star, and in 2 / out 1 (the clipped directed worst case)
        out += [frozenset(star), frozenset((0, i) for i in range(1, d + 1)),
                frozenset({(1, 0), (2, 0), (0, 3)})]
    return out if max_degree is None else [g for g in out if _within(g, max_degree, directed)]


def labellings() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Aligned labels (the worst case of sums) and mixed ones; every node in training, or
    a part (validation / test nodes hold labels too, never to be read)."""
    rng = np.random.default_rng(1)
    mixed = torch.tensor(rng.integers(0, CLASSES, N))
    every = torch.ones(N, dtype=torch.bool)
    part = torch.tensor(rng.random(N) < 0.6)
    return [(torch.zeros(N, dtype=torch.int64), every), (mixed, every), (mixed, part)]


def _incident(v: int, directed: bool) -> list[Edges]:
    if directed:
        return [frozenset({(u, v)}) for u in range(N) if u != v] + [
            frozenset({(v, u)}) for u in range(N) if u != v]
    return [frozenset({(u, v), (v, u)}) for u in range(N) if u != v]


def edge_pairs(g: Edges, train: torch.Tensor, directed: bool) -> Iterator[Neighbour]:
    """One edge toggled."""
    for v in range(N):
        for ch in _incident(v, directed):
            yield g ^ ch, train


def node_pairs(g: Edges, train: torch.Tensor, directed: bool) -> Iterator[Neighbour]:
    """v removed: every edge of v and its record (v left isolated, its label unread)."""
    for v in range(N):
        t = train.clone()
        t[v] = False
        yield frozenset(e for e in g if v not in e), t


def k_pairs(k: int) -> Pairs:
    """v's record added / removed and / or up to k of v's edges toggled."""
    def pairs(g: Edges, train: torch.Tensor, directed: bool) -> Iterator[Neighbour]:
        for v in range(N):
            flipped = train.clone()
            flipped[v] = ~flipped[v]
            for size in range(k + 1):
                for combo in itertools.combinations(_incident(v, directed), size):
                    change = frozenset().union(*combo)
                    if change:
                        yield g ^ change, train
                    yield g ^ change, flipped
    return pairs


def feature_pairs(g: Edges, train: torch.Tensor, directed: bool) -> Iterator[Neighbour]:
    """v's features and label added or removed; the structure (public) unchanged."""
    for v in range(N):
        t = train.clone()
        t[v] = ~t[v]
        yield g, t


def worst(level: str, pairs: Pairs, gs: list[Edges], directed: bool,
          c: float | None) -> float:
    """max ||hop1(G) - hop1(G')||_F over the graphs, labellings and their neighbours."""
    out = 0.0
    for g in gs:
        for y, train in labellings():
            base = hop1(level, g, y, train, c)
            for g2, t2 in pairs(g, train, directed):
                out = max(out, float((base - hop1(level, g2, y, t2, c)).norm()))
    return out


def _cases() -> Iterator[Case]:
    d = 3
    for directed in (False, True):
        kind = "directed" if directed else "undirected"
        yield Case(f"every edge toggle of {kind} graphs", {"level": "edge",
                   "directed": directed}, worst("edge", edge_pairs, graphs(directed),
                                                directed, None), tight=True)
        for c in (None, 0.7):
            yield Case(f"every node of {kind} graphs within D={d} removed, clip {c}",
                       {"level": "node", "directed": directed, "max_degree": d,
                        "row_clip": c},
                       worst("node", node_pairs, graphs(directed, d), directed, c),
                       tight=c is None)
        yield Case(f"a record and up to 1 edge of every node of {kind} graphs",
                   {"level": "k_neighbor", "directed": directed, "k": 1},
                   worst("k_neighbor", k_pairs(1), graphs(directed)[2:], directed, None))
        yield Case(f"every node's label added or removed on {kind} graphs",
                   {"level": "node_feature", "directed": directed},
                   worst("node_feature", feature_pairs, graphs(directed), directed, None),
                   tight=True)


def check(label_sensitivity: Callable[..., float]) -> SensitivityCheck:
    """The first hop of label messages, declared by ``label_sensitivity``."""
    return SensitivityCheck("DPDGC's first hop of label messages (edge, node within D, "
                            "k-neighbour, node_feature)", label_sensitivity, _cases)


__all__ = ["check", "edge_pairs", "feature_pairs", "graphs", "hop1", "k_pairs",
           "labellings", "node_pairs", "worst"]
