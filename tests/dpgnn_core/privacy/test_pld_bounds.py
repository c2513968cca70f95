"""dpgnn's vectorised Chernoff truncation bounds (:func:`~dpgnn_core.privacy.pld_library.
chernoff_bounds`, installed in place of dp-accounting's ``compute_self_convolve_bounds``)
give the library's own integers on the PMFs dpgnn composes: Gaussian, Poisson-subsampled
Gaussian (both adjacencies), DP-GNN's sampled-subgraph step, and PMFs with zero and tiny
masses; so every ``self_compose`` is the library's."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from dpgnn_core.privacy import pld as ours
from dpgnn_core.privacy import pld_library


def _dense_probs(pmf: object) -> np.ndarray:
    dense = pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf
    return np.asarray(dense._probs)  # type: ignore[attr-defined]


@functools.cache
def _pmfs() -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for z, q in [(0.6, 1.0), (1.0, 0.01), (3.0, 0.1), (20.0, 0.5)]:
        pld = ours.gaussian_pld(z, q, 1e-3)
        out[f"gauss-z{z}-q{q}-remove"] = _dense_probs(pld._pmf_remove)
        out[f"gauss-z{z}-q{q}-add"] = _dense_probs(pld._pmf_add)
    step = ours.pld_dpgnn_step(1.2, 200, 20, 3, 1e-3)
    out["dpgnn-step"] = _dense_probs(step._pmf_remove)
    rng = np.random.default_rng(0)
    spiky = rng.random(500) ** 8
    spiky[rng.random(500) < 0.5] = 0.0  # zero masses, and masses down to ~1e-30
    out["spiky"] = spiky / spiky.sum()
    out["one-point"] = np.array([1.0])
    return out


@pytest.mark.parametrize("name", sorted(_pmfs()))
def test_bounds_equal_the_librarys(name: str) -> None:
    p = _pmfs()[name]
    for times in (1, 7, 10_000):
        for tail in (0.0, 1e-15, 1e-3):
            assert pld_library.chernoff_bounds(p, times, tail) == pld_library.LIBRARY_BOUNDS(
                p, times, tail), (times, tail)


def test_custom_orders_beyond_exp_range_fall_back_to_the_library() -> None:
    p = _pmfs()["spiky"]
    orders = [-50.0, -1.0, 1.0, 50.0]
    assert pld_library.chernoff_bounds(p, 10, 1e-10, orders) == pld_library.LIBRARY_BOUNDS(
        p, 10, 1e-10, orders)


def test_installed_in_place_of_the_librarys() -> None:
    from dp_accounting.pld import common

    assert common.compute_self_convolve_bounds is pld_library.chernoff_bounds
