"""Private selection's plan and draw (dpgnn_core.sweep_tuning)."""

from __future__ import annotations

import dataclasses
import secrets
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dpgnn_core import sweep_tuning as st
from dpgnn_core.privacy.events import PrivacyError
from dpgnn_core.privacy.tuning import (
    TuningDistribution,
    calibrate_tuning_noise,
    tuning_epsilon,
)
from dpgnn_core.sweeps import SweepSpec, TuningSpec, points


def _sweep(**kw: Any) -> SweepSpec:
    base: dict[str, Any] = dict(name="t", dataset="/none", epsilons=[2.0],
                                selection="private", methods=[
                                    {"method": "dp-mlp", "grid": {"steps": [20, 300]},
                                     "fixed": {"batch_size": 16}}])
    return SweepSpec(**{**base, **kw})


@pytest.fixture(scope="module")
def plan() -> st.TuningPlan:
    sw = _sweep()
    (p,) = st.plan_private_selection(sw, points(sw), 200)
    return p


def test_tuning_spec_default_and_checks() -> None:
    d = TuningSpec().distribution(5)
    assert (d.kind, d.eta, d.gamma) == ("truncated_negative_binomial", 1.0, 0.2)
    assert TuningSpec().distribution(1).mean() == pytest.approx(2.0)  # at least 2
    e = TuningSpec(kind="truncated_negative_binomial", eta=0.5, expected_candidates=6)
    assert e.distribution(2).mean() == pytest.approx(6.0, rel=1e-9)
    assert TuningSpec(kind="poisson").distribution(3).mean() == 3.0
    for bad in [dict(kind="poisson", gamma=0.5), dict(gamma=0.5, expected_candidates=3),
                dict(kind="geometric", eta=2.0), dict(kind="truncated_negative_binomial"),
                dict(gamma=1.5), dict(kind="poisson", mu=0.5), dict(expected_candidates=1)]:
        with pytest.raises(ValueError):
            TuningSpec(**bad)
    with pytest.raises(ValueError, match="private"):
        _sweep(selection="flagged", tuning={"kind": "geometric"})


@pytest.mark.parametrize("dist", [TuningDistribution.geometric(0.2),
                                  TuningDistribution.logarithmic(0.1),
                                  TuningDistribution.truncated_negative_binomial(-0.5, 0.05),
                                  TuningDistribution.truncated_negative_binomial(3.0, 0.3),
                                  TuningDistribution.poisson(4.0)])
def test_expected_pairs_against_the_pmf(dist: TuningDistribution) -> None:
    direct = sum(k * (k - 1) * dist.pmf(k) for k in range(0, 5000))
    assert st.expected_pairs(dist) == pytest.approx(direct, rel=1e-9)


def test_calibration_meets_the_target_over_the_pointwise_max(plan: st.TuningPlan) -> None:
    d, dc = plan.distribution, plan.delta_conversion
    assert plan.delta == 1 / 2000 and 0 < plan.delta - dc < 1e-12
    # the reported ε is the tuning ε of exactly the planned ledgers, within the target
    assert plan.epsilon == tuning_epsilon(plan.ledgers(), d, dc) <= 2.0
    assert plan.epsilon > 2.0 * (1 - 1e-3)  # and not needlessly below it
    # configurations of different cost: none alone exceeds the maximum, one is cheaper
    alone = [tuning_epsilon(c.ledger, d, dc) for c in plan.candidates]
    assert max(alone) <= plan.epsilon and min(alone) < 0.9 * plan.epsilon
    # A calibration that ignores the maximum (each configuration calibrated on its own
    # curve to the target) exceeds the target once the curves are combined.
    makes = [_make(c) for c in plan.candidates]
    zs = [calibrate_tuning_noise(m, d, 2.0, dc).noise_multiplier for m in makes]
    wrong = tuning_epsilon([m(z) for m, z in zip(makes, zs, strict=True)], d, dc)
    assert wrong > 2.0


def _make(c: st.CandidatePlan) -> Any:
    from dpgnn_core.methods.registry import get

    return get("dp-mlp").ledger_for(c.spec, 200)


def test_candidates_train_with_the_planned_noise(plan: st.TuningPlan) -> None:
    from dpgnn_core.methods._private import calibrated_plan

    for i, c in enumerate(plan.candidates):
        spec = st.candidate_spec(plan, st.Draw(i, 12345))
        assert (spec.seed, spec.steps, spec.accountant) == (12345, c.steps, "rdp")
        ledger, z, report = calibrated_plan(spec, 200, _make(c), method="dp-mlp",
                                            protects="x")
        assert z == c.noise_multiplier  # what the method computes is what was planned
        st.verify_candidate(plan, st.Draw(i, 12345), report, ledger)
        with pytest.raises(PrivacyError):  # less noise than planned is refused
            st.verify_candidate(plan, st.Draw(i, 1), {**report,
                                "noise_multiplier": 0.9 * z}, _make(c)(0.9 * z))
        with pytest.raises(PrivacyError):  # another number of steps
            st.verify_candidate(plan, st.Draw(i, 1), {**report, "steps": c.steps + 1},
                                ledger)


def _stub(m: int = 3) -> Any:
    return SimpleNamespace(distribution=TuningDistribution.geometric(1 / 3),
                           candidates=[SimpleNamespace(config_id=str(i)) for i in range(m)])


def test_k_and_candidates_come_from_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake(bits: int) -> int:
        calls.append(bits)
        return 2024

    monkeypatch.setattr(secrets, "randbits", fake)
    a = st.draw(_stub(), st.secret_generator())
    b = st.draw(_stub(), st.secret_generator())
    assert calls == [128, 128] and a == b  # the source is secrets.randbits(128) alone
    assert a == st.draw(_stub(), np.random.default_rng(2024))
    monkeypatch.setattr(secrets, "randbits", lambda bits: 7)
    assert st.draw(_stub(), st.secret_generator()) != a
    # spec seeds do not enter: the plans of sweeps differing in seeds draw alike
    monkeypatch.setattr(secrets, "randbits", fake)
    assert st.draw(_stub(), st.secret_generator()) == a
    assert "seed" not in st.draw.__code__.co_varnames[:2]


def test_draws_are_distinct_and_seeds_large() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        ds = st.draw(_stub(2), rng)
        assert len({(d.index, d.seed) for d in ds}) == len(ds) >= 1
        assert all(0 <= d.seed < 2**st.SEED_BITS for d in ds)


def test_select_and_refusals(plan: st.TuningPlan) -> None:
    assert st.select([0.5, 0.7, 0.7, 0.1]) == 1
    with pytest.raises(PrivacyError):
        st.select([0.5, float("nan")])
    for method, config in [("gap-edp", {}), ("dp-mlp", {"noise_multiplier": 2.0}),
                           ("dp-mlp", {"accountant": "pld"}),
                           ("dp-mlp", {"insecure_reproducible_noise": True}),
                           ("dp-mlp", {"log_raw_loss": True})]:
        with pytest.raises(PrivacyError, match=next(iter(config), "GAP")):
            st.check_candidate_options(method, config)
    assert dataclasses.replace(plan).epsilon == plan.epsilon
