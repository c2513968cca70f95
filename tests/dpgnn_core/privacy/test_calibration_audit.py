"""Audit of the privacy accounting: the step cap of max_steps, δ defaults and warnings,
PLD as the default accountant and its fast calibration."""

from __future__ import annotations

import itertools

import pytest

from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    RdpAccountant,
    max_steps,
)
from dpgnn_core.specs import DpMlpSpec

RDP = RdpAccountant()


def _gauss(t: int, z: float = 10.0) -> Ledger:
    return Ledger().add(GaussianEvent(noise_multiplier=z, count=t))


def _poisson(z: float, q: float, steps: int) -> Ledger:
    return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=q, steps=steps),
                        sampler_scheme="poisson")


def test_max_steps_checks_its_cap() -> None:
    # ε(limit) exceeds the target: the old code returned the unchecked cap.
    limit = 1000
    target = RDP.epsilon(_gauss(700), 1e-5)
    assert RDP.epsilon(_gauss(limit), 1e-5) > target
    t = max_steps(_gauss, target, 1e-5, RDP, limit=limit)
    assert t == 700
    assert RDP.epsilon(_gauss(t), 1e-5) <= target < RDP.epsilon(_gauss(t + 1), 1e-5)


def test_max_steps_cap_reached_and_small_limits() -> None:
    target = RDP.epsilon(_gauss(5000), 1e-5)
    assert max_steps(_gauss, target, 1e-5, RDP, limit=1000) == 1000  # ε(1000) ≤ target
    assert max_steps(_gauss, target, 1e-5, RDP, limit=1024) == 1024  # cap on a power of 2
    assert max_steps(_gauss, target, 1e-5, RDP, limit=1) == 1
    small = RDP.epsilon(_gauss(3), 1e-5)
    assert max_steps(_gauss, small, 1e-5, RDP, limit=4) == 3
    assert max_steps(_gauss, small, 1e-5, RDP, limit=2) == 2


def test_resolve_steps_never_exceeds_target_at_the_cap() -> None:
    # The audit's example: noise fixed, the cap of 10^6 steps spends more than the target.
    from dpgnn_core.methods._private import MAX_STEPS

    q, z = 1e-4, 2.0
    eps_cap = RDP.epsilon(_poisson(z, q, MAX_STEPS), 1e-6)
    target = 0.95 * eps_cap
    t = max_steps(lambda s: _poisson(z, q, s), target, 1e-6, RDP, limit=MAX_STEPS)
    assert t < MAX_STEPS
    assert RDP.epsilon(_poisson(z, q, t), 1e-6) <= target


# -- δ defaults and the δ >= 1/N_train warning -------------------------------------------


def test_check_delta_vs_n() -> None:
    from dpgnn_core.methods._private import check_delta_vs_n

    assert check_delta_vs_n(1e-4, 1000) == []
    assert check_delta_vs_n(1 / 1001, 1000) == []
    with pytest.warns(UserWarning, match=r"delta.*N_train"):
        msgs = check_delta_vs_n(1 / 1000, 1000)
    assert len(msgs) == 1 and "1/1000" in msgs[0]
    assert check_delta_vs_n(0.5, 10, warn=False)


def _fake_spec(**kw):  # type: ignore[no-untyped-def]
    from dpgnn_core.specs import DpMlpSpec

    return DpMlpSpec(epsilon=2.0, steps=50, batch_size=10, **kw)


def test_calibrated_plan_warns_and_reports_large_delta() -> None:
    from dpgnn_core.methods._private import poisson_plan
    from dpgnn_core.methods.private_run import PrivateRun

    spec = _fake_spec(delta=1e-2, accountant="rdp")
    with pytest.warns(UserWarning, match=r"delta = 0.01 >= 1/N_train = 1/100"):
        _, _, report = PrivateRun().calibrate(spec, 100, poisson_plan(spec, 100, "node", "x"),
                                       method="m", protects="p")
    assert len(report["warnings"]) == 1 and "N_train" in report["warnings"][0]


def test_large_epsilon_is_accepted_loudly() -> None:
    from dpgnn_core.methods._private import check_weak_budget, poisson_plan
    from dpgnn_core.methods.private_run import PrivateRun

    assert check_weak_budget(20.0, 1e-4, 100, warn=False) == []
    spec = DpMlpSpec(epsilon=25.0, steps=50, batch_size=10, accountant="rdp")
    with pytest.warns(UserWarning, match=r"epsilon = 25 > 20"):
        _, _, report = PrivateRun().calibrate(spec, 100, poisson_plan(spec, 100, "node", "x"),
                                       method="m", protects="p")
    assert report["epsilon"] <= 25.0  # accepted
    assert len(report["warnings"]) == 1 and "rules out little" in report["warnings"][0]


def test_calibrated_plan_default_delta_does_not_warn() -> None:
    import warnings

    from dpgnn_core.methods._private import poisson_plan
    from dpgnn_core.methods.private_run import PrivateRun

    spec = _fake_spec(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, report = PrivateRun().calibrate(spec, 100, poisson_plan(spec, 100, "node", "x"),
                                       method="m", protects="p")
    assert report["delta"] == pytest.approx(1 / 1000) and report["warnings"] == []


def test_graph_classification_defaults_to_delta_one_tenth_over_n() -> None:
    from dpgnn_core.data.synthetic import er_graphs
    from dpgnn_core.methods.graph_cls import train_graph_classifier
    from dpgnn_core.specs import GraphClsSpec

    data = er_graphs(num_graphs=60, split=(40, 10, 10), seed=1)
    r = train_graph_classifier(data, GraphClsSpec(epsilon=2.0, steps=2, batch_size=10,
                                                  accountant="rdp", device="cpu",
                                                  eval_every=10**6))
    assert r.report["delta"] == pytest.approx(1 / 400)
    assert r.report["warnings"] == []
    with pytest.warns(UserWarning, match="N_train"):
        r = train_graph_classifier(data, GraphClsSpec(epsilon=2.0, steps=2, batch_size=10,
                                                      delta=1 / 40, accountant="rdp",
                                                      device="cpu", eval_every=10**6))
    assert r.report["warnings"]


# -- PLD by default, and its calibration -------------------------------------------------


def test_default_accountant_is_the_tightest_sound_one() -> None:
    from dpgnn_core.specs import DpgnnSpec, DpMlpSpec, DrwSpec, GapSpec, GraphClsSpec

    for cls in (DpgnnSpec, DpMlpSpec, GraphClsSpec):
        assert cls().accountant == "pld", cls
    assert GapSpec(epsilon=1.0).accountant == "pld"
    assert DrwSpec().accountant == "rdp"  # no PLD for sampling without replacement


def test_pld_is_tighter_than_rdp_for_dp_sgd() -> None:
    from dpgnn_core.privacy import PldAccountant

    ledger = _poisson(1.0, 0.01, 1000)
    rdp, pld = RDP.epsilon(ledger, 1e-5), PldAccountant().epsilon(ledger, 1e-5)
    assert rdp == pytest.approx(2.10, abs=0.01) and pld == pytest.approx(1.83, abs=0.01)


@pytest.mark.parametrize(("z", "q", "d"), [(1.46, 0.01, 1e-4), (0.6, 0.3, 1e-4),
                                           (5.0, 1.0, 1e-4), (2.0, 0.001, 1e-3),
                                           (1.0, 0.5, 1e-2)])
def test_vectorised_gaussian_pld_equals_dp_accounting(z: float, q: float, d: float) -> None:
    import numpy as np
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from dpgnn_core.privacy.pld import gaussian_pld

    ref = pld_lib.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=d)
    ours = gaussian_pld(z, q, d)
    for delta in (1e-3, 1e-6, 1e-9):
        assert ours.get_epsilon_for_delta(delta) == pytest.approx(
            ref.get_epsilon_for_delta(delta), rel=1e-9, abs=1e-12)
    eps = np.linspace(0.0, 3.0, 31)
    np.testing.assert_allclose(ours.get_delta_for_epsilon(eps), ref.get_delta_for_epsilon(eps),
                               rtol=1e-8, atol=1e-13)


def _dpgnn_plan(z: float, steps: int = 10_000) -> Ledger:
    from dpgnn_core.privacy import DpgnnEvent

    return Ledger().add(DpgnnEvent(noise_multiplier=z, num_train=100_000, batch_size=1000,
                                   max_degree=7, layers=1, steps=steps),
                        sampler_scheme="fixed_size_without_replacement")


def _gap_plan(z: float) -> Ledger:
    enc = PoissonGaussianEvent(noise_multiplier=z, sampling_rate=0.01, steps=10_000,
                               level="node")
    return (Ledger().add(enc, sampler_scheme="poisson")
            .add(GaussianEvent(noise_multiplier=0.8 * z, count=2, level="node"))
            .add(enc, sampler_scheme="poisson"))


@pytest.mark.parametrize("plan", [lambda z: _poisson(z, 0.01, 10_000), _dpgnn_plan, _gap_plan],
                         ids=["poisson", "dpgnn", "gap"])
@pytest.mark.parametrize("target", [0.5, 4.0])
def test_pld_calibration_is_feasible_tight_and_fast(plan, target: float) -> None:
    """Fast as in few exact PLD evaluations (the speed itself is measured in
    benchmarks/bench_calibration.py, not asserted here)."""
    from dpgnn_core.privacy import PldAccountant, calibrate_noise

    pld = PldAccountant()
    cal = calibrate_noise(plan, target, 1e-6, pld)
    assert cal.epsilon <= target
    assert pld.epsilon(plan(cal.noise_multiplier), 1e-6) == cal.epsilon
    assert pld.epsilon(plan(cal.noise_multiplier * (1 - 2e-4)), 1e-6) > target
    # the coarse proxies place the bracket; the 1e-4 grid decides it in a few evaluations
    assert cal.evaluations <= 6 and cal.proxy_evaluations > 0
    # RDP upper-bounds the PLD here: the RDP-calibrated noise needs more noise
    assert cal.noise_multiplier < calibrate_noise(plan, target, 1e-6, RDP).noise_multiplier


def test_rdp_calibration_needs_few_evaluations() -> None:
    from dpgnn_core.privacy import calibrate_noise

    for target in (0.3, 1.0, 8.0, 50.0):
        cal = calibrate_noise(_dpgnn_plan, target, 1e-6, RDP)
        assert cal.evaluations <= 12 and cal.epsilon <= target  # bisection needed 16-18
        assert RDP.epsilon(_dpgnn_plan(cal.noise_multiplier * (1 - 2e-4)), 1e-6) > target


def test_calibration_noise_floor_and_ceiling() -> None:
    from dpgnn_core.privacy import PldAccountant, PrivacyError, calibrate_noise

    # a huge target, far below the first guess z = 1
    plan = lambda z: _poisson(z, 1e-4, 1)  # noqa: E731
    cal = calibrate_noise(plan, 1e6, 1e-5, RDP)
    assert cal.epsilon <= 1e6 < RDP.epsilon(plan(cal.noise_multiplier * (1 - 2e-4)), 1e-5)
    for acc in (RDP, PldAccountant()):
        with pytest.raises(PrivacyError, match="smallest epsilon this plan reaches"):
            calibrate_noise(lambda z: _poisson(z, 0.5, 10), 1e-3, 1e-5, acc, max_noise=10.0)


def test_pld_epsilon_curve_ends_at_the_reported_epsilon() -> None:

    from dpgnn_core.privacy import PldAccountant, calibrate_noise
    from dpgnn_core.privacy.calibrate import epsilon_curve

    pld = PldAccountant()
    cal = calibrate_noise(lambda z: _poisson(z, 0.01, 10_000), 4.0, 1e-6, pld)
    curve = epsilon_curve(lambda s: _poisson(cal.noise_multiplier, 0.01, s), 10_000, 1e-6, pld)
    assert len(curve) == 20 and curve[-1] == (10_000, cal.epsilon)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(curve))
