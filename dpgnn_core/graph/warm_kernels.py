"""Compile dpgnn's two numba kernels (the DRW walk, :func:`~dpgnn_core.graph.random_walk.
drw`; DP-GNN's r-hop balls, :func:`~dpgnn_core.graph.dpgnn_sampler.sample_subgraphs`) into
numba's on-disk cache, once, on a four-node graph: ``python -m dpgnn_core.graph.warm_kernels``.

Why: both are ``numba.njit(cache=True)``; a process that first calls one with no cache
beside its source compiles it (~10-13 s of CPU each on these machines, LLVM included), and
every process that reaches it before the first one has saved its cache compiles it again.
`make test` runs this beside ``compileall`` (the same reasoning as Python's bytecode), so
no test process compiles them. The kernels' arguments are always int64/float64/bool arrays
(the wrappers convert), so the one signature compiled here is the one every run loads.
"""

from __future__ import annotations

import numpy as np

from dpgnn_core.graph.dpgnn_sampler import SampledEdges, sample_subgraphs
from dpgnn_core.graph.random_walk import drw


def warm() -> None:
    """Call both kernels once on a 4-node path (compiling them where no cache exists)."""
    edges = np.array([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]], dtype=np.int64)
    train = np.ones(4, dtype=bool)
    drw(edges, 4, train, 2, rng=0)
    sample_subgraphs(SampledEdges(edges, np.zeros(0, np.int64), edges.shape[1]), 4, train,
                     layers=1, max_degree=2)


if __name__ == "__main__":
    warm()
