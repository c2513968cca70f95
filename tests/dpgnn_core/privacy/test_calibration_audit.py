"""Audit of the privacy accounting: the step cap of max_steps, δ defaults and warnings,
PLD as the default accountant and its fast calibration."""

from __future__ import annotations

import pytest

from dpgnn_core.privacy import (
    GaussianEvent,
    Ledger,
    PoissonGaussianEvent,
    RdpAccountant,
    max_steps,
)

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
    from dpgnn_core.methods._private import calibrated_plan, poisson_plan

    spec = _fake_spec(delta=1e-2, accountant="rdp")
    with pytest.warns(UserWarning, match=r"delta = 0.01 >= 1/N_train = 1/100"):
        _, _, report = calibrated_plan(spec, 100, poisson_plan(spec, 100, "node", "x"),
                                       method="m", protects="p")
    assert len(report["warnings"]) == 1 and "N_train" in report["warnings"][0]


def test_calibrated_plan_default_delta_does_not_warn() -> None:
    import warnings

    from dpgnn_core.methods._private import calibrated_plan, poisson_plan

    spec = _fake_spec(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, report = calibrated_plan(spec, 100, poisson_plan(spec, 100, "node", "x"),
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
