"""RDP curves: agreement with Opacus and dp-accounting, DP-GNN's bound against mpmath."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp
from opacus.accountants import RDPAccountant as OpacusRDP
from opacus.accountants.analysis.rdp import compute_rdp as opacus_compute_rdp

from dpgnn_core.privacy import (
    DpgnnEvent,
    GaussianEvent,
    Ledger,
    PldAccountant,
    PoissonGaussianEvent,
    RdpAccountant,
    UniformGaussianEvent,
    neighbourhood_size,
)
from dpgnn_core.privacy.rdp import (
    DEFAULT_ORDERS,
    rdp_dpgnn,
    rdp_gaussian,
    rdp_poisson_gaussian,
    rdp_uniform_gaussian,
)

ORDERS = np.array([1.5, 2.0, 2.5, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0])


@pytest.mark.parametrize(("q", "z", "steps"), [(0.01, 1.1, 1000), (0.1, 0.8, 50),
                                              (0.001, 2.0, 10000), (1.0, 1.0, 3)])
def test_poisson_rdp_matches_opacus(q: float, z: float, steps: int) -> None:
    ours = rdp_poisson_gaussian(q, z, steps, ORDERS)
    theirs = np.asarray(opacus_compute_rdp(q=q, noise_multiplier=z, steps=steps,
                                           orders=list(ORDERS)))
    integer = ORDERS == np.round(ORDERS)
    # Integer orders: both libraries evaluate the exact binomial expansion.
    np.testing.assert_allclose(ours[integer], theirs[integer], rtol=1e-6)
    # Fractional orders: dp-accounting (which we use) sums |binomial| terms, an upper bound
    # of the exact alternating series Opacus evaluates: never below it.
    assert (ours[~integer] >= theirs[~integer] * (1 - 1e-9)).all()


@pytest.mark.parametrize(("q", "z", "steps", "delta"), [(0.01, 1.1, 1000, 1e-5),
                                                       (0.05, 0.9, 300, 1e-6)])
def test_poisson_epsilon_matches_opacus_and_dp_accounting(q, z, steps, delta) -> None:
    ledger = Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=q,
                                               steps=steps), sampler_scheme="poisson")
    ours = RdpAccountant().epsilon(ledger, delta)
    op = OpacusRDP()
    op.history = [(z, q, steps)]
    assert ours == pytest.approx(op.get_epsilon(delta), rel=0.01)
    acc = dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS))
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=0.01)
    pld_ours = PldAccountant().epsilon(ledger, delta)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)), steps)
    assert pld_ours == pytest.approx(pld.get_epsilon(delta), rel=0.01)
    assert pld_ours <= ours


def test_gaussian_composition_matches_dp_accounting() -> None:
    ledger = Ledger().add(GaussianEvent(noise_multiplier=5.0, count=3, level="edge"))
    acc = dpa_rdp.RdpAccountant(list(DEFAULT_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(5.0), 3)
    np.testing.assert_allclose(RdpAccountant().rdp(ledger), acc.rdp, rtol=1e-9)
    np.testing.assert_allclose(rdp_gaussian(5.0, ORDERS, 3), 3 * ORDERS / 50.0)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(dp_event.GaussianDpEvent(5.0), 3)
    assert PldAccountant().epsilon(ledger, 1e-5) == pytest.approx(pld.get_epsilon(1e-5),
                                                                  rel=0.01)


@pytest.mark.parametrize(("n", "m", "z", "steps"), [(1000, 10, 0.9, 200), (407, 64, 1.4, 300)])
def test_uniform_matches_dp_accounting_replace_one(n: int, m: int, z: float,
                                                   steps: int) -> None:
    from dpgnn_core.privacy.rdp import DEFAULT_ORDERS, UNIFORM_MAX_ORDER

    low = DEFAULT_ORDERS[DEFAULT_ORDERS <= UNIFORM_MAX_ORDER]  # fractional orders included
    acc = dpa_rdp.RdpAccountant(list(low), dpa_rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.SampledWithoutReplacementDpEvent(n, m, dp_event.GaussianDpEvent(z)),
                steps)
    np.testing.assert_allclose(rdp_uniform_gaussian(m / n, z, steps, low), acc.rdp,
                               rtol=1e-9)
    high = rdp_uniform_gaussian(m / n, z, steps, np.array([80.0, 4096.0]))
    assert np.isinf(high).all()  # unused orders: they can only raise epsilon


def _mp_dpgnn(lam: float, n: int, m: int, k_deg: int, r: int, alpha: float) -> float:
    """Independent evaluation with exact binomials at 60 digits."""
    mpmath.mp.dps = 60
    occ = min(neighbourhood_size(k_deg, r), n)
    nkr = neighbourhood_size(k_deg, r)
    a = mpmath.mpf(alpha)
    total = mpmath.mpf(0)
    for k in range(max(0, m + occ - n), min(m, occ) + 1):
        p = mpmath.binomial(occ, k) * mpmath.binomial(n - occ, m - k) / mpmath.binomial(n, m)
        total += p * mpmath.exp(a * (a - 1) * k**2 / (2 * mpmath.mpf(lam) ** 2 * nkr**2))
    return float(mpmath.log(total) / (a - 1))


@pytest.mark.parametrize(("lam", "n", "m", "k_deg", "r"), [
    (1.0, 1000, 100, 3, 1), (0.5, 5000, 64, 7, 2), (2.0, 100_000, 10_000, 5, 2),
    (0.3, 200, 199, 2, 3), (4.0, 10**7, 1000, 10, 2), (1.2, 300, 30, 20, 2),
])
@pytest.mark.parametrize("alpha", [1.5, 2.0, 7.0, 64.0])
def test_dpgnn_rdp_against_mpmath(lam, n, m, k_deg, r, alpha) -> None:
    ours = rdp_dpgnn(lam, n, m, k_deg, r, 1, np.array([alpha]))[0]
    assert ours == pytest.approx(_mp_dpgnn(lam, n, m, k_deg, r, alpha), rel=1e-6)


def test_dpgnn_large_order_is_finite() -> None:
    out = rdp_dpgnn(1.0, 10**7, 10**6, 100, 2, 1, np.array([4096.0]))
    assert np.isfinite(out).all() and out[0] > 0


@pytest.mark.parametrize(("k_deg", "r", "lam"), [(3, 1, 1.0), (7, 2, 0.7), (1, 0, 2.0)])
def test_dpgnn_without_amplification_is_gaussian(k_deg, r, lam) -> None:
    n = 500
    np.testing.assert_allclose(rdp_dpgnn(lam, n, n, k_deg, r, 5, ORDERS),
                               5 * ORDERS / (2 * lam**2), rtol=1e-10)


@pytest.mark.parametrize(("n", "m", "lam"), [(1000, 10, 1.0), (50, 49, 0.6), (10**6, 5, 3.0)])
def test_dpgnn_single_occurrence_is_one_record_sampled(n, m, lam) -> None:
    # N(K, r) = 1 when r = 0: a record is in the batch with probability q = m / N.
    q = m / n
    expected = [math.log(1 - q + q * math.exp(a * (a - 1) / (2 * lam**2))) / (a - 1)
                for a in ORDERS[:6]]
    np.testing.assert_allclose(rdp_dpgnn(lam, n, m, 5, 0, 1, ORDERS[:6]), expected,
                               rtol=1e-9)


@pytest.mark.parametrize(("lam", "n", "m", "k_deg", "r", "steps"), [
    (1.0, 10_000, 1000, 7, 1, 100), (2.0, 100_000, 10_000, 7, 2, 1000),
    (1.5, 5000, 50, 1, 1, 2000), (0.6, 2000, 20, 3, 2, 500),
    (4.66, 100_000, 1000, 7, 1, 10_000),
])
def test_dpgnn_pld_never_above_rdp(lam, n, m, k_deg, r, steps) -> None:
    ledger = Ledger().add(DpgnnEvent(noise_multiplier=lam, num_train=n, batch_size=m,
                                     max_degree=k_deg, layers=r, steps=steps),
                          sampler_scheme="fixed_size_without_replacement")
    for delta in (1e-5, 1e-7):
        pld, rdp = PldAccountant().epsilon(ledger, delta), RdpAccountant().epsilon(ledger, delta)
        assert 0 < pld <= rdp


def test_dpgnn_pld_without_amplification_is_exact_gaussian() -> None:
    # m = N: every step is a Gaussian with multiplier lambda; T steps = one with lambda/sqrt(T).
    lam, steps = 0.8, 10
    ledger = Ledger().add(DpgnnEvent(noise_multiplier=lam, num_train=100, batch_size=100,
                                     max_degree=3, layers=1, steps=steps),
                          sampler_scheme="fixed_size_without_replacement")
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(dp_event.GaussianDpEvent(lam / math.sqrt(steps)))
    assert PldAccountant().epsilon(ledger, 1e-6) == pytest.approx(pld.get_epsilon(1e-6),
                                                                  rel=0.01)


def test_uniform_event_refused_by_pld() -> None:
    from dpgnn_core.privacy import PrivacyError

    ledger = Ledger().add(UniformGaussianEvent(noise_multiplier=1.0, sampling_rate=0.1),
                          sampler_scheme="fixed_size_without_replacement")
    with pytest.raises(PrivacyError, match="use the RDP accountant"):
        PldAccountant().epsilon(ledger, 1e-5)
    assert RdpAccountant().epsilon(ledger, 1e-5) > 0


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 0.1, 1.0, 10.0])
def test_deltas_from_rdp_equal_the_librarys(scale: float) -> None:
    """The vectorised conversion (the Poisson tuning bound's δ̂ at one ε per order) gives
    dp-accounting's ``compute_delta`` at every ε, on curves with unusable (+inf) orders, a
    zero value, ε = 0 and an ε beyond every order's bound."""
    from dpgnn_core.privacy import PrivacyError
    from dpgnn_core.privacy import rdp as R

    o = R.DEFAULT_ORDERS
    r = scale * o * np.linspace(0.5, 2.0, o.size)
    r[:12] = np.inf
    r[40] = 0.0
    epsilons = np.concatenate([np.log1p(1 / (o - 1)), [0.0, 0.5, 3.0, 50.0]])
    ours = R.deltas_from_rdp(o, r, epsilons)
    theirs = np.array([dpa_rdp.compute_delta(list(o), list(r), float(e))[0]
                       for e in epsilons])
    np.testing.assert_allclose(ours, theirs, rtol=1e-15, atol=0)
    with pytest.raises(PrivacyError, match="orders > 1"):
        R.deltas_from_rdp(np.array([1.0, 2.0]), np.array([0.1, 0.2]), np.array([1.0]))
