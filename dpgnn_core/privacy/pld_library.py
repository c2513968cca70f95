"""Two of dp-accounting's PLD helpers, the same numbers computed without Python loops over
every grid point; installed in place of the library's functions when
:mod:`dpgnn_core.privacy.pld` is imported (the library looks both names up in its module
when it runs).

Why: on the default grid (1e-4) a PMF has 10^4-10^6 points, and in dp-accounting 0.6 these
two helpers walked them one by one in Python: together about a third of the CPU of every
PLD calibration, ε report and ε-by-step curve (so of every private run under the default
accountant). Each returns what the library's function returns, bit for bit
(``tests/dpgnn_core/privacy/test_pld_library.py`` compares them on adversarial inputs);
anything else (a sparse PMF as a Python list, input the library would refuse) goes to the
library's own function.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from dp_accounting.pld import pld_pmf

LIBRARY_TRUNCATE_TAILS = pld_pmf._truncate_tails
LIBRARY_CONNECT_DOTS = pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap


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


pld_pmf._truncate_tails = truncate_tails
pld_pmf.create_pmf_pessimistic_connect_dots_fixed_gap = connect_dots_fixed_gap
