"""dpgnn's vectorised ε-for-δ scan gives dp-accounting's answer (its Python loop) on
adversarial privacy-loss distributions: tiny and large δ, infinite mass, asymmetric pairs,
subsampling, many compositions, losses whose e^{-ℓ} underflows."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpgnn_core.privacy.pld import epsilon_for_delta

D = 1e-4


def _dense(step: float, lower: int, probs: list[float], infinity: float
           ) -> pld_lib.PrivacyLossDistribution:
    import numpy as np

    return pld_lib.PrivacyLossDistribution(pld_pmf.DensePLDPmf(
        step, lower, np.asarray(probs), infinity, pessimistic_estimate=True))


def _gaussian() -> pld_lib.PrivacyLossDistribution:
    return pld_lib.from_gaussian_mechanism(1.1, value_discretization_interval=D)


#: Each case built when a test first asks for it (``_case``), not at collection: some cost
#: seconds of dp-accounting's time, and every pytest-xdist worker collects this module.
_BUILDERS: dict[str, Callable[[], pld_lib.PrivacyLossDistribution]] = {
    "gaussian": _gaussian,
    "gaussian-composed-50": lambda: _gaussian().self_compose(50),
    "gaussian-small-sigma": lambda: pld_lib.from_gaussian_mechanism(
        0.3, value_discretization_interval=D),
    "poisson-subsampled": lambda: pld_lib.from_gaussian_mechanism(
        0.9, sampling_prob=0.02, value_discretization_interval=D).self_compose(200),
    "laplace": lambda: pld_lib.from_laplace_mechanism(0.7, value_discretization_interval=D),
    "infinite-mass": lambda: pld_lib.from_privacy_parameters(
        pld_lib.common.DifferentialPrivacyParameters(2.0, 1e-3),
        value_discretization_interval=D),
    "underflow": lambda: pld_lib.from_two_probability_mass_functions(
        {0: 0.5, 1: 0.5 - 1e-9, 2: 1e-9}, {0: 0.5, 1: 0.5, 2: 1e-320},
        value_discretization_interval=D),
    # dense PMFs built directly: mass at +∞, losses whose e^{-ℓ} underflows to 0
    # (ℓ ≥ 745), negative losses only, a single point
    "dense-infinite-mass": lambda: _dense(0.01, -50, [0.001] * 100 + [0.8989], 1e-3),
    "dense-underflow": lambda: _dense(1.0, 790, [0.25, 0.25, 0.25, 0.2], 0.0),
    "dense-underflow-then-finite": lambda: _dense(
        1.0, -3, [0.3, 0.3, 0.2] + [0.0] * 795 + [0.1, 0.1 - 1e-6], 1e-6),
    # losses of 700-719 nats: e^{-ℓ}·p is subnormal and (U - δ)/L overflows (a noise
    # search's too-small candidates; numpy once warned on every run)
    "dense-subnormal": lambda: _dense(1.0, 700, [0.05] * 20, 0.0),
    "dense-negative": lambda: _dense(0.1, -40, [0.1] * 10, 0.0),
    "dense-one-point": lambda: _dense(0.5, 3, [1.0], 0.0),
    "coarse-grid": lambda: pld_lib.from_gaussian_mechanism(
        2.0, value_discretization_interval=1e-2).self_compose(7),
}


@functools.cache
def _case(name: str) -> pld_lib.PrivacyLossDistribution:
    return _BUILDERS[name]()


@pytest.mark.parametrize("name", sorted(_BUILDERS))
@pytest.mark.parametrize("delta", [1e-12, 1e-7, 1e-5, 1e-3, 0.05, 0.3, 0.999])
def test_equals_dp_accounting(name: str, delta: float) -> None:
    pld = _case(name)
    want = pld.get_epsilon_for_delta(delta)
    got = epsilon_for_delta(pld, delta)
    if math.isinf(want):
        assert math.isinf(got)
    else:
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("name", sorted(_BUILDERS))
def test_no_floating_point_warnings(name: str) -> None:
    """No numpy warning escapes the scan (a command shows each as a ``warning:`` line)."""
    import warnings

    pld = _case(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for delta in (1e-12, 1e-5, 0.3):
            epsilon_for_delta(pld, delta)


def test_below_the_infinite_mass_is_infinite() -> None:
    pld = _case("infinite-mass")
    assert math.isinf(epsilon_for_delta(pld, 1e-4))  # δ below the mass at +∞ (1e-3)


@pytest.mark.parametrize("size", [40, 5000])  # a sparse PMF (<= 1000 points) and a dense one
def test_grid_pld_equals_the_rounded_dict_route(size: int) -> None:
    """The DP-GNN step's PLD, built from its grid array directly, is the one dp-accounting
    makes from the dict of its positive entries: the same PMF type, offset, masses (zeros
    and tiny negative rounding left out inside the support) and mass at +∞."""
    import numpy as np

    from dpgnn_core.privacy.pld import _pld_from_grid

    rng = np.random.default_rng(size)
    w = rng.random(size)
    w[:3] = 0.0  # leading zeros move the offset
    w[-2:] = [-1e-17, 0.0]  # trailing non-positive entries end the support early
    w[rng.choice(np.arange(5, size - 5), size // 10, replace=False)] = -0.0
    w[size // 2] = -1e-18
    w = w / w.sum() * (1 - 1e-6)
    lo = -size // 3
    fast = _pld_from_grid(w, lo, 1e-6, D)
    slow = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        {lo + int(i): float(w[i]) for i in np.flatnonzero(w > 0)}, 1e-6, D,
        pessimistic_estimate=True)
    a, b = fast._pmf_remove, slow._pmf_remove
    assert type(a) is type(b) and fast._symmetric and slow._symmetric
    assert a._infinity_mass == b._infinity_mass
    if size > 1000:
        assert a._lower_loss == b._lower_loss and a._probs.dtype == b._probs.dtype
        assert np.array_equal(a._probs, b._probs)
        assert not np.signbit(a._probs).any()
    for delta in (1e-9, 1e-4, 0.1):
        assert epsilon_for_delta(fast.self_compose(3), delta) == epsilon_for_delta(
            slow.self_compose(3), delta)


def test_accountant_epsilon_is_the_composed_plds_also_when_cached() -> None:
    """The PLD accountant's ε (cached by the events' numbers) is ε of the composed PLD, in
    the ledger's order, on the first and on a repeated call; a ledger it cannot analyse is
    refused every time (a refusal is not cached as an answer)."""
    from dpgnn_core.privacy.accountants import PldAccountant
    from dpgnn_core.privacy.events import (
        GaussianEvent,
        Ledger,
        PoissonGaussianEvent,
        PrivacyError,
        UniformGaussianEvent,
    )

    acc = PldAccountant(1e-3)
    ledger = Ledger().add(PoissonGaussianEvent(noise_multiplier=0.9, sampling_rate=0.05,
                                               steps=30), sampler_scheme="poisson").add(
        GaussianEvent(noise_multiplier=3.0, count=2))
    direct = [epsilon_for_delta(acc.pld(ledger), d) for d in (1e-6, 1e-3)]
    assert direct[0] > direct[1] > 0
    for _ in range(2):
        assert [acc.epsilon(ledger, d) for d in (1e-6, 1e-3)] == direct
    assert acc.epsilon(Ledger().add(GaussianEvent(noise_multiplier=3.0, count=2)), 1e-6) \
        < direct[0]  # another ledger, another answer
    wor = Ledger().add(UniformGaussianEvent(noise_multiplier=1.0, sampling_rate=0.05,
                                            steps=3),
                       sampler_scheme="fixed_size_without_replacement")
    for _ in range(2):
        with pytest.raises(PrivacyError, match="does not analyse"):
            acc.epsilon(wor, 1e-6)


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunked_scan_is_the_whole_grids_scan(chunk: int, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """The scan reads the grid in chunks from the top and ends in the chunk where it stops;
    with chunks of 1, 7 or 1,000 points (boundaries everywhere: before, at and after the
    stop, the underflow and the bottom) every ε is the float one pass over the whole grid
    gives."""
    from dpgnn_core.privacy import pld as ours

    whole = {}
    monkeypatch.setattr(ours, "SCAN_CHUNK", 1 << 40)
    for name in sorted(_BUILDERS):
        for delta in (1e-12, 1e-5, 0.3, 0.999):
            whole[name, delta] = epsilon_for_delta(_case(name), delta)
    monkeypatch.setattr(ours, "SCAN_CHUNK", chunk)
    for (name, delta), want in whole.items():
        got = epsilon_for_delta(_case(name), delta)
        assert got == want or (math.isinf(got) and math.isinf(want)), (name, delta)
