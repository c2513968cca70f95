"""dpgnn's loop-free copies of dp-accounting's PLD helpers (:mod:`dpgnn_core.privacy.
pld_library`: tail truncation, the connect-the-dots PMF) and of its sampled-without-
replacement Gaussian RDP (:func:`~dpgnn_core.privacy.rdp.wor_gaussian_rdp`) and of the
Poisson-subsampled Gaussian's integer- and fractional-order terms (``rdp.poisson_log_a_int``,
``poisson_log_a_frac``) give the library's own numbers, bit for bit, on adversarial inputs;
so every PLD and every DRW curve dpgnn computes is the library's."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from dp_accounting.pld import pld_pmf
from dp_accounting.rdp import rdp_privacy_accountant as lib_rdp

from dpgnn_core.privacy import pld, pld_library
from dpgnn_core.privacy.rdp import rdp_uniform_gaussian, wor_gaussian_rdp


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    spiky = rng.random(3000) ** 12
    spiky[rng.random(3000) < 0.5] = 0.0  # zero masses, and masses down to ~1e-40
    gauss = pld.gaussian_pld(0.8, 0.05, 1e-3)._pmf_remove._probs
    return {"spiky": spiky / spiky.sum(), "gauss": np.asarray(gauss),
            "tiny-total": np.full(50, 1e-18), "one": np.array([1.0]),
            "negative-rounding": np.concatenate([[-1e-19, 2e-17], rng.random(100),
                                                 [-3e-20]])}


def _outcome(fn: Any, *args: Any) -> Any:
    """What ``fn(*args)`` returns, or the type of the exception it raises."""
    try:
        return fn(*args)
    except Exception as e:  # compared with the library's
        return type(e)


@pytest.mark.parametrize("name", sorted(_arrays()))
@pytest.mark.parametrize("pessimistic", [True, False])
def test_truncate_tails_equals_the_librarys(name: str, pessimistic: bool) -> None:
    for tail in (0.0, 1e-15, 1e-6, 0.3, 2.0):
        p = _arrays()[name]
        ours = _outcome(pld_library.truncate_tails, p.copy(), tail, pessimistic)
        want = _outcome(pld_library.LIBRARY_TRUNCATE_TAILS, p.copy(), tail, pessimistic)
        if isinstance(want, type):  # all the mass cut: the library fails, and so do we
            assert ours is want, (tail, ours)
            continue
        assert not isinstance(ours, type), (tail, ours)
        (off, probs, mass), (want_off, want_probs, want_mass) = ours, want
        assert off == want_off and mass == want_mass, (tail, off, want_off)
        assert np.array_equal(probs, want_probs)
    # a sparse PMF's Python list goes to the library's function unchanged
    assert pld_library.truncate_tails([0.5, 0.5], 1e-3, True) == \
        pld_library.LIBRARY_TRUNCATE_TAILS([0.5, 0.5], 1e-3, True)


def _deltas() -> dict[str, tuple[int, np.ndarray]]:
    eps = np.arange(-2000, 6001) * 1e-3
    curve = pld._gaussian_mixture_delta(eps, np.array([0.7, 0.3]), np.array([0.0, 1.5]))
    flat = np.concatenate([np.full(1500, 0.4), np.full(1500, 0.0)])
    return {"mixture": (-2000, curve), "flat-steps": (-100, flat),
            "small-grid": (3, curve[:900])}


@pytest.mark.parametrize("name", sorted(_deltas()))
def test_connect_dots_equals_the_librarys(name: str) -> None:
    lower, deltas = _deltas()[name]
    upper = lower + len(deltas) - 1
    for d in (1e-3, 1e-4):
        ours = pld_library.connect_dots_fixed_gap(d, lower, upper, deltas)
        want = pld_library.LIBRARY_CONNECT_DOTS(d, lower, upper, deltas)
        assert type(ours) is type(want)
        assert ours._discretization == want._discretization
        assert ours._infinity_mass == want._infinity_mass
        assert ours._pessimistic_estimate == want._pessimistic_estimate
        if isinstance(want, pld_pmf.DensePLDPmf):
            assert ours._lower_loss == want._lower_loss
            assert np.array_equal(ours._probs, want._probs)
        else:
            assert ours._loss_probs == want._loss_probs


def test_connect_dots_refuses_what_the_library_refuses() -> None:
    rising = np.linspace(0.0, 0.5, 2000)
    with pytest.raises(ValueError, match="non-increasing"):
        pld_library.connect_dots_fixed_gap(1e-3, 0, 1999, rising)
    with pytest.raises(ValueError, match="Length of deltas"):
        pld_library.connect_dots_fixed_gap(1e-3, 0, 2005, np.zeros(2000))
    with pytest.raises(ValueError, match="between 0 and 1"):
        pld_library.connect_dots_fixed_gap(1e-3, 0, 1999, np.full(2000, 1.5))


def test_gaussian_and_composed_plds_equal_the_librarys(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """End to end: a subsampled Gaussian's PLD, composed with itself and with a DP-GNN
    step, is the same PMF with the library's helpers put back."""
    def build() -> Any:
        g = pld.gaussian_pld(1.1, 0.02, 1e-3)
        return g.self_compose(50).compose(pld.pld_dpgnn_step(1.5, 300, 30, 3, 1e-3))

    ours = build()
    monkeypatch.setattr(pld_pmf, "_truncate_tails", pld_library.LIBRARY_TRUNCATE_TAILS)
    monkeypatch.setattr(pld_pmf, "create_pmf_pessimistic_connect_dots_fixed_gap",
                        pld_library.LIBRARY_CONNECT_DOTS)
    want = build()
    for side in ("_pmf_remove", "_pmf_add"):
        a, b = getattr(ours, side), getattr(want, side)
        assert a._lower_loss == b._lower_loss and a._infinity_mass == b._infinity_mass
        assert np.array_equal(a._probs, b._probs)
    for delta in (1e-3, 1e-7):
        assert ours.get_epsilon_for_delta(delta) == want.get_epsilon_for_delta(delta)


def test_installed_in_place_of_the_librarys() -> None:
    assert pld_pmf._truncate_tails is pld_library.truncate_tails
    assert pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap is \
        pld_library.connect_dots_fixed_gap


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.3, 0.6), (1e-5, 0.8),
                                          (0.5, 0.3), (1 / 3, 2.0), (0.9, 12.0)])
def test_wor_gaussian_rdp_equals_the_librarys(q: float, sigma: float) -> None:
    """Every integer order up to 64 (the largest dpgnn asks for), some alone."""
    for orders in (tuple(range(2, 65)), (2,), (7, 3, 40)):
        want = lib_rdp._compute_rdp_sample_wor_gaussian(q, sigma, [float(a) for a in orders])
        assert np.array_equal(wor_gaussian_rdp(q, sigma, orders), want), orders


def test_uniform_gaussian_curve_is_the_accountants() -> None:
    """The composed curve is dp-accounting's RdpAccountant composing the event (to the
    rounding of ``(α - 1) r / (α - 1)``, the interpolation at an integer order)."""
    from dp_accounting import dp_event

    ints = list(range(2, 65))
    acc = lib_rdp.RdpAccountant([float(a) for a in ints], lib_rdp.NeighborRel.REPLACE_ONE)
    acc.compose(dp_event.SampledWithoutReplacementDpEvent(
        1000, 30, dp_event.GaussianDpEvent(0.9)), 250)
    np.testing.assert_allclose(rdp_uniform_gaussian(0.03, 0.9, 250, np.array(ints, float)),
                               acc.rdp, rtol=1e-14, atol=0)
    # out of the exact range or degenerate: the library's own numbers
    assert np.array_equal(wor_gaussian_rdp(1.0, 2.0, (2, 3)),
                          lib_rdp._compute_rdp_sample_wor_gaussian(1.0, 2.0, [2.0, 3.0]))


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.3, 0.6), (1e-4, 5.0), (0.5, 0.3),
                                          (1 / 3, 2.0), (0.9, 12.0), (0.02, 0.45)])
def test_poisson_log_a_int_equals_the_librarys(q: float, sigma: float) -> None:
    """Every integer order dpgnn's RDP curves use (DEFAULT_ORDERS), and small ones."""
    from dpgnn_core.privacy import rdp

    orders = sorted({int(a) for a in rdp.DEFAULT_ORDERS if float(a).is_integer()}
                    | set(range(0, 11)))
    for alpha in orders:
        assert rdp.poisson_log_a_int(q, sigma, alpha) == rdp._LIBRARY_LOG_A_INT(
            q, sigma, alpha), alpha
    assert lib_rdp._compute_log_a_int is rdp.poisson_log_a_int  # installed


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.3, 0.6), (1e-4, 5.0), (0.5, 0.3),
                                          (1 / 3, 2.0), (0.9, 12.0), (0.02, 0.45),
                                          (0.5, 100.0)])
def test_poisson_log_a_frac_equals_the_librarys(q: float, sigma: float,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Every fractional order dpgnn's RDP curves use, and some beyond; (0.5, 100) does not
    converge at the smallest orders: +inf and the library's warning, as the library."""
    from dpgnn_core.privacy import rdp

    orders = [a for a in rdp.DEFAULT_ORDERS if not float(a).is_integer()] + [
        15.25, 63.5, 200.5]
    for alpha in orders:
        caplog.clear()
        ours = rdp.poisson_log_a_frac(q, sigma, alpha)
        ours_log = [r.getMessage() for r in caplog.records]
        caplog.clear()
        theirs = rdp._LIBRARY_LOG_A_FRAC(q, sigma, alpha)
        assert ours == theirs or (math.isnan(ours) and math.isnan(theirs)), alpha
        assert ours_log == [r.getMessage() for r in caplog.records], alpha
    assert lib_rdp._compute_log_a_frac is rdp.poisson_log_a_frac  # installed
