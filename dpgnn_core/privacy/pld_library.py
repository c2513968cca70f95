"""Three of dp-accounting's PLD helpers, the same numbers computed without Python loops over
every grid point or order; installed in place of the library's functions when
:mod:`dpgnn_core.privacy.pld` is imported (the library looks the names up in its modules
when it runs). The RDP accountant's replaced helpers are in :mod:`dpgnn_core.privacy.rdp`.

Why: on the default grid (1e-4) a PMF has 10^4-10^6 points, and in dp-accounting 0.6 the
tail truncation and the connect-the-dots PMF walked them one by one in Python (together about
a third of the CPU of every PLD calibration, ε report and ε-by-step curve, so of every
private run under the default accountant), and the Chernoff bounds called scipy's
``logsumexp`` 40 times over the whole PMF (:func:`chernoff_bounds`). Each returns what the
library's function returns, bit for bit (``tests/dpgnn_core/privacy/test_pld_library.py``
and ``test_pld_bounds.py`` compare them on adversarial inputs);
anything else (a sparse PMF as a Python list, input the library would refuse) goes to the
library's own function.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_pmf

LIBRARY_BOUNDS = pld_common.compute_self_convolve_bounds
LIBRARY_SELF_CONVOLVE = pld_common.self_convolve

#: The most grid points a PLD may have: 2^28 (2 GiB of float64; composing one takes FFT
#: buffers of complex numbers, about four times that at peak). A plan past it is refused in
#: one line (:func:`check_grid`) instead of numpy's ``MemoryError`` (10^9 DP-MLP steps asked
#: for a 36 GiB array, ``dpgnn privacy epsilon --steps 1e12`` for 3.5 PiB) or "Maximum
#: allowed size exceeded" (a noise multiplier of 1e-9: losses up to ~10^18, a grid of
#: 10^22 points). Plans the defaults calibrate stay far below it: ε = 100 peaks at 1.8 GB.
MAX_PMF_POINTS = 2**28


def check_grid(points: int, what: str) -> None:
    """Refuse a PLD of more than :data:`MAX_PMF_POINTS` grid points before it is allocated.

    Raises:
        PrivacyError: one line naming ``what`` (the plan), the points and the memory.
    """
    if points > MAX_PMF_POINTS:
        from dpgnn_core.privacy.events import PrivacyError

        raise PrivacyError(
            f"the PLD accountant cannot hold {what} in memory (a grid of {points:.3g} "
            f"privacy-loss points, {points * 8 / 2**30:.3g} GiB, above its limit of "
            f"{MAX_PMF_POINTS:.3g}); use the RDP accountant (--accountant rdp), which has "
            "no grid, or fewer steps / more noise")
LIBRARY_TRUNCATE_TAILS = pld_pmf._truncate_tails
LIBRARY_CONNECT_DOTS = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap


def chernoff_bounds(input_list: npt.ArrayLike, num_times: int,
                    tail_mass_truncation: float = 0,
                    orders: npt.ArrayLike | None = None) -> tuple[int, int]:
    """dp-accounting's ``compute_self_convolve_bounds`` (the Chernoff truncation bounds of
    a PMF convolved ``num_times`` with itself), the same numbers computed with one matrix
    product instead of 40 calls of scipy's ``logsumexp``.

    Why by hand: in dp-accounting 0.6 those 40 calls over the whole PMF were ~90 % of every
    ``self_compose``, so of every PLD calibration and ε curve (a 30-step DP-MLP run spent
    6.3 s of its 9 s in them). The log-moment generating function at order ``o`` is
    ``log Σ_k p_k e^{o k}``; the library's orders keep ``|o k| ≤ 20``, so the sum is
    computed directly (no overflow; every term is ≥ e^{-20} p_k) rather than shifted by its
    maximum. ``tests/dpgnn_core/privacy/test_pld_bounds.py`` checks the bounds equal the
    library's on PMFs of every kind dpgnn composes. Installed in place of the library's function at
    import (its ``self_convolve`` looks the name up when it runs).
    """
    p = np.asarray(input_list, dtype=np.float64)
    n = len(p)
    upper, lower = (n - 1) * num_times, 0
    if tail_mass_truncation == 0:
        return lower, upper
    k = np.arange(n, dtype=np.float64)
    if orders is None:
        order_list = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n
        log_mgfs = _default_log_mgfs(p, k)
    else:
        order_list = np.asarray(orders, dtype=np.float64)
        if order_list.size and np.max(np.abs(order_list)) * max(n - 1, 1) > 700:
            # orders the caller chose beyond exp's range: the library's log-space way
            lo, hi = LIBRARY_BOUNDS(input_list, num_times, tail_mass_truncation, orders)
            return int(lo), int(hi)
        per_chunk = max(1, 4_000_000 // max(n, 1))  # at most ~32 MB of exponentials at once
        log_mgfs = np.empty(order_list.size)
        for start in range(0, order_list.size, per_chunk):
            chunk = order_list[start:start + per_chunk]
            with np.errstate(divide="ignore"):
                log_mgfs[start:start + len(chunk)] = np.log(np.exp(np.outer(chunk, k)) @ p)
    log_two_over_tail = math.log(2 / tail_mass_truncation)
    for order, log_mgf in zip(order_list.tolist(), log_mgfs.tolist(), strict=True):
        bound = (num_times * log_mgf + log_two_over_tail) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            upper = min(upper, math.ceil(bound))
        if order < 0:
            lower = max(lower, math.floor(bound))
    return lower, upper


def _default_log_mgfs(p: npt.NDArray[np.float64], k: npt.NDArray[np.float64]
                      ) -> npt.NDArray[np.float64]:
    """``log Σ_k p_k e^{o k}`` at the library's default orders o = m / n, m = -20..-1,
    1..20, in that order. Since e^{(m/n) k} = (e^{k/n})^m, each order's terms are the
    previous order's times one vector: two exponentials per grid point instead of 40 (16×
    faster on a 4·10^5-point PMF; the exponentials were ~40 s of the suite's CPU). Each
    product adds one rounding, so a term is within ~20 ulp of the direct exponential: the
    bounds equal the library's (``test_pld_bounds.py``) unless one lies within rounding
    of an integer, where either integer is the Chernoff bound up to rounding (the
    library's own logsumexp rounds too)."""
    n = len(p)
    out = np.empty(40)
    # orders 1/n .. 20/n fill slots 20..39; -1/n .. -20/n fill slots 19..0
    for base, slots in ((np.exp(k / n), range(20, 40)), (np.exp(-k / n), range(19, -1, -1))):
        term = p.copy()
        for slot in slots:
            term *= base
            out[slot] = term.sum()
    with np.errstate(divide="ignore"):
        return np.log(out)


def _prefix_to_truncate(arr: npt.NDArray[np.float64], threshold: float) -> int:
    """The library's ``_find_prefix_to_truncate``: the index of the first element at which
    the running sum of ``arr`` exceeds ``threshold`` (``len(arr)`` if none). Its Python
    loop adds the elements one by one in order; ``np.cumsum`` does the same additions in
    the same order (an accumulate is sequential), so the running sums are the same
    floats."""
    hit = np.flatnonzero(np.cumsum(arr) > threshold)
    return int(hit[0]) if hit.size else len(arr)


def truncate_tails(probs: Any, tail_mass_truncation: float, pessimistic_estimate: bool
                   ) -> tuple[int, Any, float]:
    """dp-accounting's ``pld_pmf._truncate_tails`` (cut the largest prefix and suffix of
    mass ≤ ``tail_mass_truncation`` / 2 each) with the prefix searches vectorised; a
    non-array input (a sparse PMF's list) goes to the library's function."""
    if tail_mass_truncation == 0 or not isinstance(probs, np.ndarray) or probs.ndim != 1:
        return LIBRARY_TRUNCATE_TAILS(probs, tail_mass_truncation,  # type: ignore[no-any-return]
                                      pessimistic_estimate)
    left_idx = _prefix_to_truncate(probs, tail_mass_truncation / 2)
    right_idx = len(probs) - _prefix_to_truncate(np.flip(probs), tail_mass_truncation / 2)
    right_idx = max(right_idx, left_idx + 1)
    left_mass = np.sum(probs[:left_idx])
    right_mass = np.sum(probs[right_idx:])
    truncated_probs = probs[left_idx:right_idx]
    if pessimistic_estimate:
        truncated_probs[0] += left_mass
        return left_idx, truncated_probs, right_mass
    truncated_probs[-1] += right_mass
    return left_idx, truncated_probs, 0


def connect_dots_fixed_gap(discretization: float, rounded_epsilon_lower: int,
                           rounded_epsilon_upper: int, deltas: npt.ArrayLike) -> Any:
    """dp-accounting's ``pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap`` (the
    pessimistic connect-the-dots PMF on a contiguous grid), the same formulas on the same
    arrays, with the dense PMF built from the array: the library puts every grid point in
    a Python dict and reads it back into a list (``create_pmf``), most of its time. A
    grid small enough for a sparse PMF, or input the library refuses, goes to the
    library's function (which raises its own error)."""
    d = np.asarray(deltas, dtype=np.float64)
    n = rounded_epsilon_upper - rounded_epsilon_lower + 1
    if (n <= pld_pmf._MAX_PMF_SPARSE_SIZE or d.ndim != 1 or d.size != n
            or np.any(d < 0) or np.any(d > 1)
            or np.any(np.diff(d) > pld_pmf._DELTA_DIFF_TOLERANCE)):
        return LIBRARY_CONNECT_DOTS(discretization, rounded_epsilon_lower,
                                    rounded_epsilon_upper, deltas)
    d = np.minimum.accumulate(d)
    diffs = np.diff(d)
    probs = np.zeros_like(d)
    probs[0] = 1 - d[0] + diffs[0] / math.expm1(discretization)
    probs[1:-1] = ((diffs[1:] - diffs[:-1] * math.exp(discretization))
                   / math.expm1(discretization))
    probs[-1] = diffs[-1] / math.expm1(-discretization)
    probs = np.maximum(0.0, probs)
    # create_pmf: dictionary_to_list of {lower + i: probs[i]} is probs itself, in order
    return pld_pmf.DensePLDPmf(discretization, rounded_epsilon_lower, np.array(probs),
                               d[-1], True)


def self_convolve(input_list: npt.ArrayLike, num_times: int,
                  tail_mass_truncation: float = 0) -> tuple[int, Any]:
    """dp-accounting's ``common.self_convolve`` (a PMF convolved ``num_times`` with itself
    by FFT, its tails truncated at the Chernoff bounds), the same code with one step
    added: the output's length is checked (:func:`check_grid`) before the FFT buffers are
    allocated, so a composition too large for memory is one line, not numpy's
    ``MemoryError``."""
    from scipy import fft

    lower, upper = pld_common.compute_self_convolve_bounds(input_list, num_times,
                                                           tail_mass_truncation)
    check_grid(upper - lower + 1, f"{num_times:,} composed steps")
    output_len = upper - lower + 1
    fast_len = fft.next_fast_len(max(output_len, len(input_list)))  # type: ignore[arg-type]
    out = np.real(fft.ifft(fft.fft(input_list, fast_len) ** num_times))
    return lower, np.roll(out, -lower)[:output_len]


pld_common.compute_self_convolve_bounds = chernoff_bounds
pld_common.self_convolve = self_convolve
pld_pmf._truncate_tails = truncate_tails
pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap = connect_dots_fixed_gap
