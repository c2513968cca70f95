"""Planning: the smallest noise meeting a target (ε, δ), and steps until a budget is spent.

Both are monotone searches (ε falls with noise, rises with steps) that keep the feasible
side of the bracket, so the returned plan never exceeds the target. They never minimise
|ε − target| (GAP's calibration does, and can return a plan just over budget).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dpgnn_core.privacy.accountants import Accountant, check_delta, check_epsilon
from dpgnn_core.privacy.events import Ledger, PrivacyError


@dataclass(frozen=True)
class Calibration:
    noise_multiplier: float
    epsilon: float
    delta: float
    evaluations: int


def calibrate_noise(
    plan: Callable[[float], Ledger],
    epsilon: float,
    delta: float,
    accountant: Accountant,
    *,
    rtol: float = 1e-4,
    max_noise: float = 1e6,
) -> Calibration:
    """Smallest noise multiplier z (to relative tolerance ``rtol``) with ε(plan(z)) ≤ target.

    Args:
        plan (callable): z ↦ the ledger of the whole training plan at noise z.
        epsilon (float): target ε.
        delta (float): δ.
        accountant (Accountant): how to compose the ledger.
        rtol (float, optional): relative width of the final bracket. (default: :obj:`1e-4`)
        max_noise (float, optional): give up above this noise. (default: :obj:`1e6`)
    """
    check_epsilon(epsilon)
    check_delta(delta)
    evals = 0

    def eps(z: float) -> float:
        nonlocal evals
        evals += 1
        return accountant.epsilon(plan(z), delta)

    hi = 1.0
    e_hi = eps(hi)
    while e_hi > epsilon:
        hi *= 2.0
        if hi > max_noise:
            floor = eps(max_noise)
            raise PrivacyError(f"no noise multiplier up to {max_noise:g} reaches epsilon "
                               f"{epsilon} at delta {delta}: the smallest epsilon this plan "
                               f"reaches is {floor:.4g} (fewer steps, a smaller sampling rate "
                               "or a larger delta lower it)")
        e_hi = eps(hi)
    lo = hi / 2.0
    e_lo = eps(lo)
    while e_lo <= epsilon and lo > 1e-6:
        hi, e_hi = lo, e_lo
        lo = lo / 2.0
        e_lo = eps(lo)
    while hi / lo - 1.0 > rtol:
        mid = (lo * hi) ** 0.5
        e_mid = eps(mid)
        if e_mid <= epsilon:
            hi, e_hi = mid, e_mid
        else:
            lo = mid
    return Calibration(hi, e_hi, delta, evals)


def max_steps(
    plan: Callable[[int], Ledger],
    epsilon: float,
    delta: float,
    accountant: Accountant,
    *,
    limit: int = 10**9,
) -> int:
    """Largest number of steps T ≤ ``limit`` with ε(plan(T)) ≤ target; 0 if even one step
    exceeds it.

    Args:
        plan (callable): T ↦ the ledger after T steps.
        limit (int, optional): the largest T returned; it is checked like any other T (the
            answer is below it when ε(plan(limit)) exceeds the target). (default: 10^9)
    """
    check_epsilon(epsilon)
    check_delta(delta)
    if int(limit) != limit or limit < 1:
        raise PrivacyError(f"limit must be an integer >= 1, got {limit!r}")

    def ok(t: int) -> bool:
        return accountant.epsilon(plan(t), delta) <= epsilon

    if not ok(1):
        return 0
    lo, hi = 1, 2  # invariant: ok(lo); hi is either not ok or not yet checked
    while True:
        if hi >= limit:
            if ok(limit):
                return int(limit)
            hi = int(limit)
            break
        if not ok(hi):
            break
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo


def epsilon_curve(plan: Callable[[int], Ledger], total_steps: int, delta: float,
                  accountant: Accountant, points: int = 20) -> list[tuple[int, float]]:
    """ε spent after t steps (for tracking the budget over a run). ``plan`` maps a number of
    steps to its ledger.

    With the RDP accountant every step is reported: a plan's RDP is linear in its steps, so
    one curve for a single step, scaled by t, gives every t exactly. Other accountants
    report ``points`` evenly spaced t.
    """
    from dpgnn_core.privacy.accountants import RdpAccountant
    from dpgnn_core.privacy.rdp import epsilon_from_rdp

    if isinstance(accountant, RdpAccountant):
        one = accountant.rdp(plan(1))
        if plan(1).entries:
            return [(t, epsilon_from_rdp(accountant.orders, t * one, delta)[0])
                    for t in range(1, total_steps + 1)]
    steps = sorted({max(1, round(total_steps * i / points)) for i in range(1, points + 1)})
    return [(t, accountant.epsilon(plan(t), delta)) for t in steps]
