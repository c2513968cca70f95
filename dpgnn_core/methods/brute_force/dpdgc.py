"""DPDGC's releases: the aggregation hop :math:`\\mathrm{clip}_c(A W)` of rows of norm <= 1
(:func:`~dpgnn_core.methods.dpdgc_messages.aggregation_sensitivity`) and the adjacency
encoder's clipped gradient sum (:func:`~dpgnn_core.methods.dpdgc.encoder_sensitivity`),
each over every neighbouring graph of its level on small random graphs (edge: one edge
toggled; node: a node within D removed with its edges and record; k-neighbour: up to k
edges at one node toggled, its record kept or dropped), with aligned and random rows; the
classifier's DP-Adam over rows is :mod:`.rows`'s check. The aggregation's bound is reached
without clipping; the encoder's per-record bound (2C per changed record) is reached only
in the limit, so its cases are not tight (the observed worst case is a sizeable fraction
of it)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

from dpgnn_core.methods.brute_force import rows
from dpgnn_core.privacy.pma import aggregation_matrix, clip_rows
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck

Edges = set[tuple[int, int]]


def edge_array(edges: Edges) -> np.ndarray:
    """``[2, E]`` int64 of a set of (src, dst)."""
    return np.array(sorted(edges), dtype=np.int64).T.reshape(2, -1)


def undirected(edges: Edges) -> Edges:
    """Both directions of every edge."""
    return edges | {(b, a) for a, b in edges}


def random_graph(n: int, p: float, seed: int, directed: bool) -> Edges:
    """Each pair an edge with probability p (both directions unless ``directed``)."""
    rng = np.random.default_rng(seed)
    pairs = itertools.permutations(range(n), 2) if directed else \
        itertools.combinations(range(n), 2)
    edges = {(a, b) for a, b in pairs if rng.random() < p}
    return edges if directed else undirected(edges)


def bounded(edges: Edges, n: int, d: int, directed: bool) -> Edges:
    """Drop edges (deterministically) until every degree is within d (in + out if
    directed): the graphs the node-level relation ranges over."""
    out: Edges = set()
    deg = [0] * n
    for a, b in sorted(edges):
        if not directed and a > b:
            continue
        if deg[a] < d and deg[b] < d:
            out |= {(a, b)} if directed else {(a, b), (b, a)}
            deg[a] += 1
            deg[b] += 1
    return out


def incident(v: int, n: int, directed: bool) -> list[Edges]:
    """The single-edge changes at v: each as the set of directed messages it is."""
    out: list[Edges] = []
    for u in range(n):
        if u != v:
            out += [{(u, v)}, {(v, u)}] if directed else [{(u, v), (v, u)}]
    return out


@functools.lru_cache(maxsize=4096)
def adjacency(edges: frozenset[tuple[int, int]], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(aggregation_matrix, its transpose) of a graph in float64, dense (tiny graphs)."""
    ei = torch.from_numpy(edge_array(set(edges))) if edges else \
        torch.zeros(2, 0, dtype=torch.int64)
    return (aggregation_matrix(ei, n).to(torch.float64).to_dense(),
            aggregation_matrix(ei.flip(0), n).to(torch.float64).to_dense())


def aggregate(w: torch.Tensor, edges: Edges, n: int, c: float | None) -> torch.Tensor:
    """clip_c(A W): row i sums the rows of i's senders."""
    return clip_rows(adjacency(frozenset(edges), n)[0] @ w, c)


def unit_rows(n: int, seed: int) -> list[torch.Tensor]:
    """Adversarial embeddings: all aligned unit rows, and random rows of norm <= 1."""
    # Seeded on purpose: these are the check's input data (the same cases on every run),
    # not a mechanism's noise or sampling, which the check never draws.
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return [torch.ones(n, 3, dtype=torch.float64) / math.sqrt(3), clip_rows(w, 1.0)]


def _agg_worst(graphs: list[Edges], n: int, c: float | None,
               neighbours: Callable[[Edges, int], Iterator[Edges]]) -> float:
    worst = 0.0
    for s, g in enumerate(graphs):
        for w in unit_rows(n, s):
            base = aggregate(w, g, n, c)
            for v in range(n):
                for other in neighbours(g, v):
                    worst = max(worst, float((base - aggregate(w, other, n, c)).norm()))
    return worst


def toggles(g: Edges, v: int, *, n: int, directed: bool, size: int = 1) -> Iterator[Edges]:
    """``g`` with 1..size of the single-edge changes at v applied."""
    single = incident(v, n, directed)
    for m in range(1, size + 1):
        for combo in itertools.combinations(single, m):
            yield g ^ set().union(*combo)


def _removed(g: Edges, v: int) -> Iterator[Edges]:
    yield {e for e in g if v not in e}


def _aggregation_cases() -> Iterator[Case]:
    n, d = 7, 3
    for directed in (False, True):
        kind = "directed" if directed else "undirected"
        graphs = [random_graph(n, 0.4, s, directed) for s in range(2)]
        yield Case(f"every edge toggle of {kind} random graphs",
                   {"level": "edge", "directed": directed},
                   _agg_worst(graphs, n, None, functools.partial(
                       toggles, n=n, directed=directed)), tight=True)
        star = {(i, 0) for i in range(1, d + 1)}
        stars = [undirected(star)] if not directed else [
            star, {(0, i) for i in range(1, d + 1)}, {(1, 0), (0, 2), (0, 3)}]
        within = [bounded(g, n, d, directed) for g in graphs] + stars
        for c in (None, 0.5, 1.5):
            worst = _agg_worst(within, n, c, _removed)
            yield Case(f"every node of {kind} graphs within D={d} and stars removed, clip {c}",
                       {"level": "node", "directed": directed, "max_degree": d,
                        "row_clip": c}, worst, tight=c is None)
        for k in (1, 2):
            worst = _agg_worst(graphs[:1], n, None, functools.partial(
                toggles, n=n, directed=directed, size=k))
            # the aligned worst case from the empty graph: k edges into v (and out)
            w = unit_rows(n, 0)[0]
            add = set().union(*[{(u, 0)} if directed else {(u, 0), (0, u)}
                                for u in range(1, k + 1)])
            worst = max(worst, float((aggregate(w, set(), n, None)
                                      - aggregate(w, add, n, None)).norm()))
            yield Case(f"up to {k} edge toggles at every node of a {kind} random graph and "
                       "k aligned edges added", {"level": "k_neighbor", "directed": directed,
                                                 "k": k}, worst, tight=True)


def aggregation_check(sensitivity: Callable[..., float]) -> SensitivityCheck:
    """The aggregation hop, declared by DPDGC's ``aggregation_sensitivity``."""
    return SensitivityCheck("DPDGC's aggregation hop clip_c(A W) (edge, node within D, "
                            "k-neighbour)", sensitivity, _aggregation_cases)


def _encoder_neighbours(level: str, g: Edges, v: int, n: int, directed: bool,
                        train: torch.Tensor, k: int) -> list[tuple[Edges, torch.Tensor]]:
    """(graph, training mask) of every neighbour at v: edge, one edge toggled; node, v
    removed with its edges and record; k-neighbour, up to k edges toggled, record kept or
    dropped."""
    gone = train.clone()
    gone[v] = False
    single = incident(v, n, directed)
    if level == "edge":
        return [(g ^ ch, train) for ch in single]
    if level == "node":
        return [({e for e in g if v not in e}, gone)]
    return [(g ^ set().union(*combo), mask) for mask in (train, gone)
            for size in range(k + 1) for combo in itertools.combinations(single, size)]


def _encoder_cases(gradient_sum: Callable[..., tuple[torch.Tensor, float]],
                   head: torch.Tensor) -> Iterator[Case]:
    n, clip, d, k = 6, 1.0, 3, 2
    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, head.shape[1], (n,), generator=gen)
    train = torch.ones(n, dtype=torch.bool)
    w_small = torch.randn(n, head.shape[0], generator=gen, dtype=torch.float64)
    w_large = torch.randn(n, head.shape[0], generator=gen, dtype=torch.float64) * 20

    def grad(edges: Edges, mask: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        adj_t, adj = adjacency(frozenset(edges), n)
        return gradient_sum(adj_t.to_sparse_csr(), adj.to_sparse_csr(), w, head, y, mask,
                            clip)[0]
    for directed, level in itertools.product((False, True), ("edge", "node", "k_neighbor")):
        g = random_graph(n, 0.5, 0, directed)
        g = bounded(g, n, d, directed) if level == "node" else g
        worst = 0.0
        for w in (w_small, w_large):
            base = grad(g, train, w)
            for v in range(n):
                for edges, mask in _encoder_neighbours(level, g, v, n, directed, train, k):
                    worst = max(worst, float((base - grad(edges, mask, w)).norm()))
        yield Case(f"every {level} neighbour of a {'directed' if directed else 'undirected'} "
                   "random graph, embeddings at 1x and 20x", {
                       "level": level, "directed": directed, "clip": clip,
                       "max_degree": d, "k": k}, worst)


def checks(aggregation_sensitivity: Callable[..., float],
           encoder_sensitivity: Callable[..., float],
           gradient_sum: Callable[..., tuple[torch.Tensor, float]],
           head: torch.Tensor) -> tuple[SensitivityCheck, ...]:
    """DPDGC's checks, from the functions its module calibrates and computes with (passed
    in: no import back into it): the aggregation, the encoder (``gradient_sum`` with the
    fixed ``head``), the classifier's DP-Adam over rows."""
    encoder = SensitivityCheck(
        "DPDGC's adjacency encoder: one step's clipped gradient sum (edge, node within D, "
        "k-neighbour)", encoder_sensitivity, lambda: _encoder_cases(gradient_sum, head))
    return (aggregation_check(aggregation_sensitivity), encoder,
            rows.check("DPDGC's classifier (node, k-neighbour, node_feature): DP-Adam over "
                       "rows [x_v, H_v] (add/remove one node's row)"))


__all__ = ["Edges", "adjacency", "aggregate", "aggregation_check", "bounded", "checks",
           "edge_array", "incident", "random_graph", "toggles", "undirected", "unit_rows"]
