"""The numba warm-up compiles the one signature that the samplers' real calls use, so a
process that loads the cache it saved compiles nothing (dpgnn_core/graph/warm_kernels.py)."""

from __future__ import annotations

import numpy as np

from dpgnn_core.graph import dpgnn_sampler, random_walk, warm_kernels


def test_real_calls_use_the_warmed_signature() -> None:
    warm_kernels.warm()
    walks, balls = list(random_walk._walks.signatures), list(dpgnn_sampler._balls.signatures)
    assert len(walks) == 1 and len(balls) == 1
    rng = np.random.default_rng(0)
    n = 50
    src = rng.integers(0, n, 300).astype(np.int32)  # int32 input, as a loader may give
    dst = rng.integers(0, n, 300).astype(np.int32)
    edges = np.stack([src, dst])
    train = rng.random(n) < 0.6
    random_walk.drw(edges, n, train, 4, restarts=2, rng=1)
    kept = np.unique(np.stack([src, dst]).astype(np.int64), axis=1)
    sampled = dpgnn_sampler.SampledEdges(kept, np.zeros(0, np.int64), kept.shape[1])
    dpgnn_sampler.sample_subgraphs(sampled, n, train, layers=2, max_degree=10)
    assert list(random_walk._walks.signatures) == walks
    assert list(dpgnn_sampler._balls.signatures) == balls
