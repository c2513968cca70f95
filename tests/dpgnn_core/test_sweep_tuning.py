"""Private selection's plan and draw (dpgnn_core.sweep_tuning)."""

from __future__ import annotations

import dataclasses
import secrets
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dpgnn_core import sweep_tuning as st
from dpgnn_core.privacy.events import GaussianEvent, Ledger, PrivacyError
from dpgnn_core.privacy.report import PrivacyReport
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


def test_calibration_meets_the_target_over_the_pointwise_max(plan: st.TuningPlan) -> None:
    d, dc = plan.distribution, plan.delta
    assert plan.delta == 1 / 2000  # converted at δ itself: no total-variation term
    assert "delta_conversion" not in plan.describe()
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
    from dpgnn_core.methods.private_run import PrivateRun

    for i, c in enumerate(plan.candidates):
        spec = st.candidate_spec(plan, st.Draw(i, 12345))
        assert (spec.seed, spec.steps, spec.accountant) == (12345, c.steps, "rdp")
        ledger, z, report = PrivateRun().calibrate(spec, 200, _make(c), method="dp-mlp",
                                            protects="x")
        assert z == c.noise_multiplier  # what the method computes is what was planned
        typed = PrivacyReport.from_dict(report)
        st.verify_candidate(plan, st.Draw(i, 12345), typed, ledger)
        with pytest.raises(PrivacyError):  # less noise than planned is refused
            less = dataclasses.replace(typed, noise_multiplier=0.9 * z)
            st.verify_candidate(plan, st.Draw(i, 1), less, _make(c)(0.9 * z))
        with pytest.raises(PrivacyError):  # another number of steps
            other = dataclasses.replace(typed, steps=c.steps + 1)
            st.verify_candidate(plan, st.Draw(i, 1), other, ledger)


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


def test_draws_are_iid_and_never_redrawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 33 §3: a draw in which two candidates coincided was redrawn, which cost a
    total-variation term that the odometer refused above budget ε ≈ 27. The draw is now K
    i.i.d. (configuration, seed) pairs taken as they come: coinciding candidates stay
    apart by their index (their tasks carry it), nothing is redrawn."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        ds = st.draw(_stub(2), rng)
        assert len(ds) >= 1 and all(0 <= d.seed < 2**st.SEED_BITS for d in ds)
    # one configuration and two possible seeds: long draws must repeat a candidate
    monkeypatch.setattr(st, "SEED_BITS", 1)
    stub = _stub(1)
    rng, again = np.random.default_rng(5), np.random.default_rng(5)
    repeated = 0
    for _ in range(50):
        ds = st.draw(stub, rng)
        k = stub.distribution.sample(again)  # the same stream: K, then the pairs, once
        again.integers(0, 1, size=k)
        seeds = again.integers(0, 2, size=k, dtype=np.int64)
        assert [d.seed for d in ds] == seeds.tolist() and len(ds) == k
        repeated += len({(d.index, d.seed) for d in ds}) < len(ds)
    assert repeated > 10


def test_selection_is_admitted_under_a_large_budget(plan: st.TuningPlan, tmp_path: Path
                                                    ) -> None:
    """Issue 33 §3: under `budget set --epsilon 30 --delta 1e-4` every private selection with
    E[K] = 3 was refused ("total-variation terms 1.3e-18 exceed the filter's allowance
    4.68e-19": the allowance 0.05·δ/(1 + e^ε) falls below the seed-collision bound above
    ε ≈ 27; this plan's E[K] = 2 at ε = 32). The charge has no total-variation term now,
    and the filter admits it."""
    from dpgnn_core.budget import BudgetStore
    from flows.sweep_tuning import tuning_charge

    charge = tuning_charge(plan)
    s = BudgetStore(tmp_path / "budget.sqlite")
    s.set_budget("ab" * 32, "ds", None, epsilon=32.0, delta=1e-4)
    s.reserve("ab" * 32, "ds", None, charge, method="dp-mlp (private selection)",
              run_id="t", delta=plan.delta, epsilon=plan.epsilon)
    (rec,) = s.summary(s.resolve("ab" * 32)).records
    assert rec.status == "reserved"
    assert charge.curve is not None and charge.curve.tv == 0.0


def test_an_unreachable_number_of_candidates_is_refused_naming_it(plan: st.TuningPlan
                                                                  ) -> None:
    """Issue 33 §5: `expected_candidates = 1e6` failed after Prefect and Dask had started,
    with advice about steps and sampling rates. The pre-flight (no training noise
    calibrated) refuses it, naming E[K]: above the cap, and below it a target under the
    floor the number of candidates (and the score) alone cost."""
    sw = _sweep(epsilons=[4.0], tuning={"expected_candidates": 1e6})
    with pytest.raises(PrivacyError, match=r"E\[K\] = 1e\+06.*expected_candidates"):
        st.preflight_private_selection(sw, points(sw), 200)
    with pytest.raises(PrivacyError, match=r"E\[K\] = 1e\+06"):  # the flow's plan too
        st.plan_private_selection(sw, points(sw), 200)
    sw = _sweep(epsilons=[0.05], tuning={"expected_candidates": 5000})
    with pytest.raises(PrivacyError, match=r"E\[K\] = 5000.*at least 0\.0[5-9].*score_share"):
        st.preflight_private_selection(sw, points(sw), 200)
    d = TuningSpec(expected_candidates=5000).distribution(2)
    floor = st.tuning_floor(d, 1 / 2000)
    # the floor is the tuning ε of a base mechanism that releases nothing about the data:
    # every order's term is log(E[K])/(λ-1) and the λ̂ term; more noise cannot go below it
    assert 0 < floor < st.tuning_floor(d, 1 / 2000, plan.score)
    assert floor == pytest.approx(tuning_epsilon(
        Ledger().add(GaussianEvent(noise_multiplier=1e9, count=1)), d, 1 / 2000), rel=1e-3)
    st.preflight_private_selection(_sweep(), points(_sweep()), 200)  # a feasible one
    st.preflight_private_selection(_sweep(selection="flagged"), [], 0)  # nothing to check


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
