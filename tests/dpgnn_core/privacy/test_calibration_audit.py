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
