"""GAP's and ProGAP's aggregations (PMA, one hop): the clipped sum over in-neighbours of
unit rows, before its noise, with one edge toggled (edge level) or one node removed with
its edges (node level, degrees within D), on random degree-bounded graphs, stars and mixed
in/out stars, aligned and random rows, with and without row clipping. The declared
sensitivity is :func:`~dpgnn_core.privacy.pma.sensitivity`, the function both families
calibrate their noise with; the aligned (mixed) stars attain it without clipping.
ProGAP's stage k sums the normalised embeddings of the frozen stage k - 1
(:func:`~dpgnn_core.methods.progap.stage_sum`), checked under random weights and
adversarial earlier releases and under a stage whose embedding is one constant row."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from dpgnn_core.methods.brute_force import rows
from dpgnn_core.methods.brute_force.graphs import random_bounded, removed, star
from dpgnn_core.privacy.pma import aggregation_matrix, clip_rows, row_normalise, sensitivity
from dpgnn_core.privacy.sensitivity import Case, SensitivityCheck

D = 4
#: An aggregation of the rows the family aggregates: (edge list, row clip) -> [n, d].
Aggregate = Callable[[np.ndarray, "float | None"], torch.Tensor]


def _pma(x: torch.Tensor) -> Aggregate:
    """One PMA hop of unit rows ``x`` (GAP)."""
    def agg(ei: np.ndarray, c: float | None) -> torch.Tensor:
        # the library's matrix, multiplied dense: a sparse product of a tiny graph costs
        # milliseconds of thread start-up, and the brute force runs thousands
        adj = aggregation_matrix(torch.from_numpy(ei), x.shape[0]).to_dense()
        return clip_rows(adj @ row_normalise(x), c)
    return agg


def _moved(agg: Aggregate, ei: np.ndarray, other: np.ndarray, c: float | None) -> float:
    return float((agg(ei, c) - agg(other, c)).norm())


def _worst_removal(agg: Aggregate, ei: np.ndarray, nodes: int, c: float | None) -> float:
    """max over v of ||agg(G) - agg(G - v)||_F."""
    base = agg(ei, c)
    return max(float((base - agg(removed(ei, v), c)).norm()) for v in range(nodes))


def mixed_stars(d: int, directed: bool) -> list[np.ndarray]:
    """Hub 0 at degree d: undirected, the star; directed, a in-leaves -> hub and hub ->
    d - a out-leaves for every a (the worst case of a row clip is one of them)."""
    if not directed:
        return [star(d)]
    out = []
    for a in range(d + 1):
        src = [*range(1, a + 1), *([0] * (d - a))]
        dst = [*([0] * a), *range(a + 1, d + 1)]
        out.append(np.array([src, dst], dtype=np.int64).reshape(2, -1))
    return out


def _edge_toggles(ei: np.ndarray, n: int, directed: bool) -> Iterator[np.ndarray]:
    """Every graph one edge away from ``ei`` (an undirected edge is both directions)."""
    have = set(map(tuple, ei.T.tolist()))
    for u in range(n):
        for w in range(n):
            if u == w or (not directed and w < u):
                continue
            change = {(u, w)} if directed else {(u, w), (w, u)}
            new = sorted(have ^ change)
            yield np.array(new, dtype=np.int64).T.reshape(2, -1)


def edge_cases(make: Callable[[int, int], Aggregate]) -> Iterator[Case]:
    """One edge added or removed, on a random graph and on the empty graph, aligned rows
    (``make(n, seed)`` builds the aggregation of n nodes): Δ = 1 directed, √2
    undirected, attained."""
    n = 7
    for directed in (False, True):
        worst = 0.0
        agg = make(n, -1)
        for ei in (random_bounded(n, 3, 0, directed), np.zeros((2, 0), dtype=np.int64)):
            base = agg(ei, None)
            for other in _edge_toggles(ei, n, directed):
                worst = max(worst, float((base - agg(other, None)).norm()))
        yield Case(f"every edge toggle of a {'directed' if directed else 'undirected'} "
                   "random graph and of the empty graph, aligned rows",
                   {"level": "edge", "max_degree": None, "directed": directed}, worst,
                   tight=True)


def node_cases(make: Callable[[int, int], Aggregate], n: int = 30) -> Iterator[Case]:
    """Every node of random graphs within D removed with its edges, and each star's hub
    (aligned rows): Δ_node(D, c), attained by the aligned (mixed) stars unless c < 1 (a
    clipped leaf then moves by c, not the bound's 1)."""
    for directed in (False, True):
        for c in (None, 0.5, 1.5, 100.0):
            worst = 0.0
            for seed in range(2):
                ei = random_bounded(n, D, seed, directed)
                for agg in (make(n, -1), make(n, seed)):
                    worst = max(worst, _worst_removal(agg, ei, n, c))
            for ei in mixed_stars(D, directed):
                worst = max(worst, _moved(make(D + 1, -1), ei, removed(ei, 0), c))
            yield Case(f"every node of random {'directed' if directed else 'undirected'} "
                       f"graphs within D={D} and the hubs of stars, row clip {c}",
                       {"level": "node", "max_degree": D, "directed": directed,
                        "row_clip": c}, worst, tight=c is None or c >= 1)


def _gap_rows(n: int, seed: int) -> Aggregate:
    """Aligned rows (seed < 0) or random ones: the check's input data, seeded so each run
    tries the same cases (PMA's noise is never drawn here: the check is pre-noise)."""
    if seed < 0:
        return _pma(torch.ones(n, 3))
    return _pma(torch.randn(n, 3, generator=torch.Generator().manual_seed(seed)) * 5)


def _gap_cases() -> Iterator[Case]:
    yield from edge_cases(_gap_rows)
    yield from node_cases(_gap_rows)


def _progap_stage(stage_sum: Callable[..., torch.Tensor], model_type: Callable[..., Any],
                  n: int, seed: int) -> Aggregate:
    """Stage k = 2's sum (ProGAP's ``stage_sum`` of a ``model_type(6, 4, 1, 2, 3)``) under
    random weights and scaled random earlier releases (seed >= 0), or under a stage k - 1
    whose embedding is one constant row (aligned)."""
    torch.manual_seed(max(seed, 0))
    model = model_type(6, 4, 1, 2, 3)
    gen = torch.Generator().manual_seed(max(seed, 0))
    x, aggs = torch.randn(n, 6, generator=gen) * 5, torch.randn(n, 2, 4, generator=gen) * 10
    if seed < 0:
        lin = model.stages[1].base[0]
        with torch.no_grad():
            lin.weight.zero_()
            lin.bias.fill_(1.0)

    def agg(ei: np.ndarray, c: float | None) -> torch.Tensor:
        return stage_sum(model, x, aggs, torch.from_numpy(ei), 2, c)
    return agg


def gap_checks() -> tuple[SensitivityCheck, ...]:
    """GAP's releases: the PMA hop (edge: one edge; node: one node with its edges, degrees
    within D) and, at node level, the encoder's and classifier's DP-SGD over node rows."""
    return (SensitivityCheck("GAP's PMA hop (add/remove one edge, or one node within D)",
                             sensitivity, _gap_cases),
            rows.check("GAP-NDP's encoder and classifier: DP-SGD over node rows "
                       "(add/remove one node)"))


def progap_checks(stage_sum: Callable[..., torch.Tensor], model_type: Callable[..., Any]
                  ) -> tuple[SensitivityCheck, ...]:
    """ProGAP's releases: the stage aggregation (the same hop over the frozen stage's
    embeddings; its module passes its ``stage_sum`` and ``ProgapModel``, no import back
    into it) and, at node level, each stage's DP-SGD over node rows."""
    def make(n: int, seed: int) -> Aggregate:
        return _progap_stage(stage_sum, model_type, n, seed)

    def cases() -> Iterator[Case]:
        yield from edge_cases(make)
        yield from node_cases(make, n=20)

    return (SensitivityCheck("ProGAP's stage-k aggregation (add/remove one edge, or one "
                             "node within D)", sensitivity, cases),
            rows.check("ProGAP-NDP's stages: DP-SGD over node rows (add/remove one node)"))


__all__ = ["edge_cases", "gap_checks", "mixed_stars", "node_cases", "progap_checks"]
