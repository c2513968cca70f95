"""Planning: the smallest noise meeting a target (ε, δ), and steps until a budget is spent.

Both are monotone searches (ε falls with noise, rises with steps) that keep the feasible
side of the bracket, so the returned plan never exceeds the target. They never minimise
|ε − target| (GAP's calibration does, and can return a plan just over budget).

The noise search works on log ε against log z, a nearly straight line: safeguarded secant
steps (a bisection whenever the bracket stops halving) that aim just past the estimated
root, alternately from above and from below, so both ends of the bracket close on it in a
few evaluations. An accountant that offers a cheaper :meth:`~Accountant.proxy` (PLD on a
coarser grid) is first calibrated through the proxy; the search under the real accountant
then starts from the proxy's answer and slope and typically needs three evaluations. The
proxy only places the bracket: every ε that decides the result is the real accountant's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dpgnn_core.privacy.accountants import Accountant, check_delta, check_epsilon
from dpgnn_core.privacy.events import Ledger, PrivacyError


@dataclass(frozen=True)
class Calibration:
    """The result of :func:`calibrate_noise`.

    Attributes:
        noise_multiplier (float): the calibrated z.
        epsilon (float): ε of the plan at z, by the accountant (≤ the target).
        delta (float): δ.
        evaluations (int): ε evaluations by the accountant.
        proxy_evaluations (int): ε evaluations by its cheaper proxy, if any.
    """

    noise_multiplier: float
    epsilon: float
    delta: float
    evaluations: int
    proxy_evaluations: int = 0


#: Smallest noise multiplier the search goes down to (a plan still within budget there is
#: returned at that noise).
MIN_NOISE = 1e-6


class _TooLittleNoise(Exception):
    pass


def _objective(plan: Callable[[float], Ledger], accountant: Accountant, delta: float,
               target: float, counter: list[int], seen: dict[float, float]
               ) -> Callable[[float], float]:
    """x = log z ↦ log ε(plan(e^x)) − log target (−inf for ε = 0, +inf for ε = inf); the
    accountant's ε is kept in ``seen[x]``."""
    log_target = math.log(target)

    def g(x: float) -> float:
        counter[0] += 1
        e = accountant.epsilon(plan(math.exp(x)), delta)
        seen[x] = e
        if e <= 0.0:
            return -math.inf
        gx = math.log(e) - log_target
        # the sign decides feasibility: it must be that of e − target, exactly
        return max(gx, 1e-300) if e > target else min(gx, 0.0)
    return g


def _bracket(g: Callable[[float], float], x0: float, g0: float, step: float, x_min: float,
             x_max: float) -> tuple[float | None, float, float, float]:
    """(a, g(a), b, g(b)) with g(a) > 0 >= g(b), galloping from x0 by ``step`` (doubled
    each time); a is None when g stays <= 0 down to ``x_min``. Raises
    :class:`_TooLittleNoise` with the floor when g stays > 0 up to ``x_max``."""
    if g0 <= 0:
        b, gb = x0, g0
        while True:
            x = b - step
            if x < x_min:
                return None, math.nan, b, gb
            gx = g(x)
            if gx > 0:
                return x, gx, b, gb
            b, gb, step = x, gx, 2.0 * step
    a, ga = x0, g0
    while True:
        x = min(a + step, x_max)
        if x <= a:
            raise _TooLittleNoise
        gx = g(x)
        if gx <= 0:
            return a, ga, x, gx
        if x >= x_max:
            raise _TooLittleNoise
        a, ga, step = x, gx, 2.0 * step


def _refine(g: Callable[[float], float], a: float, ga: float, b: float, gb: float,
            tol: float) -> tuple[float, float, float, float]:
    """Shrink the bracket (g(a) > 0 >= g(b)) to width <= ``tol``, keeping its invariant."""
    widths = [b - a]
    last = ""
    while b - a > tol:
        if math.isfinite(ga) and math.isfinite(gb) and ga != gb and not (
                len(widths) >= 3 and widths[-1] > 0.5 * widths[-3]):
            x = b - gb * (b - a) / (gb - ga)  # secant root
            # aim just past it: above after the low end moved (or at first), below after
            # the high end moved, so each end lands within tol/3 of the root in turn
            x += -tol / 3.0 if last == "hi" else tol / 3.0
            margin = min(tol / 6.0, (b - a) / 4.0)
            x = min(max(x, a + margin), b - margin)
        else:  # an infinite end, or the bracket stopped halving: bisect
            x = 0.5 * (a + b)
        gx = g(x)
        if gx <= 0:
            b, gb, last = x, gx, "hi"
        else:
            a, ga, last = x, gx, "lo"
        widths.append(b - a)
    return a, ga, b, gb


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

    The result is the upper end of a bracket [z_lo, z] with ε(plan(z_lo)) > target ≥
    ε(plan(z)) under ``accountant`` and z / z_lo − 1 ≤ ``rtol`` (or z = 1e-6 when even that
    little noise meets the target).

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
    if not rtol > 0:
        raise PrivacyError(f"rtol must be > 0, got {rtol!r}")
    counts: list[int] = []
    try:
        *_, b, _, eps = _calibrate(plan, epsilon, delta, accountant, math.log1p(rtol),
                                   math.log(max_noise), counts)
    except _TooLittleNoise as e:
        floor = e.args[0] if e.args and not math.isnan(e.args[0]) else \
            accountant.epsilon(plan(max_noise), delta)
        raise PrivacyError(f"no noise multiplier up to {max_noise:g} reaches epsilon "
                           f"{epsilon} at delta {delta}: the smallest epsilon this plan "
                           f"reaches is {floor:.4g} (fewer steps, a smaller sampling rate "
                           "or a larger delta lower it)") from None
    if not eps <= epsilon:  # pragma: no cover - guarded by the bracket's invariant
        raise PrivacyError(f"calibration ended above the target: {eps} > {epsilon}")
    return Calibration(math.exp(b), eps, delta, counts[0], sum(counts[1:]))


def _calibrate(plan: Callable[[float], Ledger], epsilon: float, delta: float,
               accountant: Accountant, tol: float, x_max: float, counts: list[int]
               ) -> tuple[float | None, float, float, float, float]:
    """The final bracket (a, g(a), b, g(b)) in log z under ``accountant`` (width <= ``tol``;
    a is None at the noise floor) and ε at b. Starts from its proxy's calibration
    (recursively, at 10× the width) when it has one. ``counts`` receives the number of
    evaluations per level, this one first."""
    level = len(counts)
    counts.append(0)
    counter = [0]
    seen: dict[float, float] = {}
    g = _objective(plan, accountant, delta, epsilon, counter, seen)
    x0, inv_slope = 0.0, math.nan  # where the search starts; 1 / |d log ε / d log z|
    proxy = accountant.proxy()
    if proxy is not None:
        try:
            pa, pga, pb, pgb, _ = _calibrate(plan, epsilon, delta, proxy, 10.0 * tol, x_max,
                                             counts)
        except _TooLittleNoise:
            pass  # the proxy is coarser, hence more pessimistic: search from scratch
        else:
            x0 = pb
            if pa is not None and math.isfinite(pga) and math.isfinite(pgb) and pgb < pga:
                inv_slope = (pb - pa) / (pga - pgb)
    try:
        g0 = g(x0)
        if math.isfinite(inv_slope) and math.isfinite(g0):
            # the root estimated from the proxy's slope, and tol/3 past it
            step = abs(g0) * inv_slope + tol / 3.0
        else:
            step = math.log(2.0)
        a, ga, b, gb = _bracket(g, x0, g0, step, math.log(MIN_NOISE), x_max)
        if a is not None:
            a, ga, b, gb = _refine(g, a, ga, b, gb, tol)
    except _TooLittleNoise:
        raise _TooLittleNoise(seen.get(x_max, math.nan)) from None
    finally:
        counts[level] = counter[0]
    return a, ga, b, gb, seen[b]


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
    report ``points`` evenly spaced t: the last (the run's ε) by ``accountant`` itself, the
    others by its cheaper :meth:`~Accountant.proxy` (PLD on a 10× coarser grid, about 10×
    faster), capped at the last value. Both are upper bounds on ε after t steps: the
    proxy's losses are discretised pessimistically, and ε after t ≤ T steps is at most ε
    after T (the first t steps' output is a post-processing of the whole run's).
    """
    from dpgnn_core.privacy.accountants import RdpAccountant
    from dpgnn_core.privacy.rdp import epsilon_from_rdp

    if isinstance(accountant, RdpAccountant):
        one = accountant.rdp(plan(1))
        if plan(1).entries:
            return [(t, epsilon_from_rdp(accountant.orders, t * one, delta)[0])
                    for t in range(1, total_steps + 1)]
    steps = sorted({max(1, round(total_steps * i / points)) for i in range(1, points + 1)})
    last = accountant.epsilon(plan(steps[-1]), delta)
    cheap = accountant.proxy() or accountant
    return [(t, min(cheap.epsilon(plan(t), delta), last)) for t in steps[:-1]] + [
        (steps[-1], last)]
