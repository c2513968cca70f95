r"""ε lower bounds from the outcome of a membership attack: the statistics of an audit.

An audit refutes a claimed (ε, δ)-DP guarantee: it runs an experiment whose outcome would
be unlikely (probability ≤ β) under *every* (ε, δ)-DP mechanism, and reports the largest ε
refuted at confidence 1 − β. Two experiments are supported.

**One-run audit** (Steinke, Nasr & Jagielski, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023, arXiv:2305.08846). m canaries are each included independently with
probability 1/2; from one training run the attacker guesses the membership of r of them
(abstaining on the other m − r) and v guesses are correct. Write

.. math::
    q_\varepsilon = \frac{e^\varepsilon}{1 + e^\varepsilon}, \qquad
    f_\varepsilon(k) = \Pr_{W \sim \mathrm{Bin}(r,\, q_\varepsilon)}[W \ge k].
    \tag{1}

The paper's bound for (ε, δ)-DP (the approximate-DP theorem of its Section 5, Corollary 5.4
in arXiv v1, with the reference code of its Appendix D) states that the number of correct
guesses V of any attacker against any (ε, δ)-DP mechanism satisfies, for all v,

.. math::
    \Pr[V \ge v] \le p_{\varepsilon,\delta}(v) = \min\Bigl(1,\;
    f_\varepsilon(v) + 2 m \delta \max_{1 \le i \le m}
    \frac{f_\varepsilon(v - i) - f_\varepsilon(v)}{i}\Bigr).
    \tag{2}

For i > v, :math:`f_\varepsilon(v - i) = 1`, so the ratio is at most its value at i = v and
the maximum runs over 1 ≤ i ≤ v only; the numerator is
:math:`\Pr[v - i \le W < v]`, a sum of i binomial probabilities (summed directly, not as a
difference of tails, so nothing cancels). With δ = 0, (2) is the pure-DP statement
:math:`\Pr[V \ge v] \le f_\varepsilon(v)`: the attacker is no better than ε-randomized
response on each guess. The ε lower bound at confidence 1 − β is

.. math::
    \hat\varepsilon = \sup\{\varepsilon \ge 0 : p_{\varepsilon,\delta}(v) \le \beta\}
    \quad (0 \text{ when the set is empty}).
    \tag{3}

Soundness of (3): a mechanism that is (ε*, δ)-DP is (ε, δ)-DP for every ε ≥ ε*, so
:math:`g(v) = \inf_{\varepsilon \ge \varepsilon^*} p_{\varepsilon,\delta}(v)` bounds
Pr[V ≥ v] for every v. The event ε̂ > ε* lies within the event g(V) ≤ β; with v₀ the
smallest value for which g(v₀) ≤ β, that lies within {V ≥ v₀}, of probability ≤ g(v₀) ≤ β. So
Pr[ε̂ > ε*] ≤ β, whether or not (2) is monotone in ε.

Computation: (3) is found by bisection on ε that keeps an ε with p ≤ β as its lower end
(the returned value always satisfies p_{ε̂,δ}(v) ≤ β, so it is sound by the argument above)
and stops at a bracket of width :data:`EPSILON_TOLERANCE`. When 2mδ ≤ 1, every term
:math:`(1 - 2m\delta/i) f_\varepsilon(v) + (2m\delta/i) f_\varepsilon(v - i)` of the maximum
is a non-negative combination of binomial tails, which grow with q, so (2) is nondecreasing
in ε and the bisection returns the supremum (3) to within the tolerance, from below. When
2mδ > 1 (a δ far above 1/m, where the bound is weak anyway) (2) need not be monotone; the
bisection then returns an ε with p ≤ β that may lie below the supremum, i.e. a bound never
larger than the paper's. The paper's worked examples are reproduced: (m, r, v, δ, β) =
(1000, 100, 75, 1e-4, 0.05) gives 0.673 and (100000, 1510, 1439, 1e-5, 0.05) gives 2.675.

**Multi-run audit** (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021). A membership test
is run on R_in trainings with the canary and R_out without: TP + FN = R_in and
FP + TN = R_out. (ε, δ)-DP implies, for any test (Kairouz, Oh & Viswanath 2015),

.. math::
    \mathrm{TPR} \le e^\varepsilon\, \mathrm{FPR} + \delta, \qquad
    \mathrm{TNR} \le e^\varepsilon\, \mathrm{FNR} + \delta,
    \tag{4}

so with Clopper–Pearson bounds

.. math::
    \hat\varepsilon = \max\Bigl(0,\; \log\frac{\mathrm{TPR}_{lo} - \delta}{\mathrm{FPR}_{hi}},\;
    \log\frac{\mathrm{TNR}_{lo} - \delta}{\mathrm{FNR}_{hi}}\Bigr),
    \tag{5}

a term being left out when its numerator is ≤ 0. The bounds are the ends of the two-sided
Clopper–Pearson intervals at confidence 1 − β: TPR_lo is the β/2 lower bound of TP/R_in and
FPR_hi the 1 − β/2 upper bound of FP/R_out. Since TNR_lo = 1 − FPR_hi and
FNR_hi = 1 − TPR_lo, both terms of (5) hold on the same event {TPR ≥ TPR_lo,
FPR ≤ FPR_hi}, of probability ≥ 1 − β by the union bound, so their maximum is a lower bound
at confidence 1 − β.

Neither bound corrects for a choice made after seeing the outcome (a threshold, or r, picked
to maximise ε̂): the caller fixes them in advance, on held-out data, or divides β among the
choices (Bonferroni).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import numpy as np

from dpgnn_core.audit.defaults import DEFAULT_BETA as DEFAULT_BETA
from dpgnn_core.errors import PrivacyError

#: Width of the final bisection bracket on ε in :func:`one_run_epsilon_lower_bound`.
EPSILON_TOLERANCE = 1e-9

Method = Literal["one-run", "multi-run"]


@dataclass(frozen=True)
class AuditBound:
    """An audited ε lower bound: the claim "not (ε, δ)-DP for any ε < ``epsilon_lower``",
    at confidence ``confidence``.

    Attributes:
        epsilon_lower (float): the lower bound on ε (0 when the outcome refutes nothing).
        confidence (float): 1 − β.
        method (str): ``"one-run"`` or ``"multi-run"``.
        delta (float): the δ the bound is stated at.
        counts (Mapping[str, int]): the outcome the bound was computed from: ``m``, ``r``,
            ``v`` (one-run) or ``tp``, ``fn``, ``fp``, ``tn`` (multi-run). Read-only.
    """

    epsilon_lower: float
    confidence: float
    method: Method
    delta: float
    counts: Mapping[str, int] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counts", MappingProxyType(dict(self.counts)))

    @property
    def beta(self) -> float:
        """β = 1 − confidence."""
        return 1.0 - self.confidence

    def to_dict(self) -> dict[str, Any]:
        """The bound as plain JSON-ready values."""
        return {
            "method": self.method,
            "epsilon_lower": self.epsilon_lower,
            "confidence": self.confidence,
            "delta": self.delta,
            "counts": dict(self.counts),
        }


# --------------------------------------------------------------------------- validation


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise PrivacyError(f"{name} must be a non-negative integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise PrivacyError(f"{name} must be a non-negative integer, got {value!r}") from None
    if n < 0:
        raise PrivacyError(f"{name} must be a non-negative integer, got {value!r}")
    return n


def _unit_interval(name: str, value: Any, *, zero_ok: bool) -> float:
    """``value`` as a float in [0, 1) (``zero_ok``) or (0, 1), else a one-line error."""
    interval = "[0, 1)" if zero_ok else "(0, 1)"
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PrivacyError(f"{name} must lie in {interval}, got {value!r}") from None
    if not (0.0 <= x if zero_ok else 0.0 < x) or not x < 1.0:
        raise PrivacyError(f"{name} must lie in {interval}, got {value!r}")
    return x


def _delta(delta: Any) -> float:
    return _unit_interval("delta", delta, zero_ok=True)


def _beta(beta: Any) -> float:
    return _unit_interval("beta", beta, zero_ok=False)


def _one_run_counts(m: Any, r: Any, v: Any) -> tuple[int, int, int]:
    mm, rr, vv = _count("m", m), _count("r", r), _count("v", v)
    if mm < 1:
        raise PrivacyError(f"m (canaries) must be at least 1, got {m!r}")
    if rr > mm:
        raise PrivacyError(f"r (guesses) must be at most m = {mm}, got {r!r}")
    if vv > rr:
        raise PrivacyError(f"v (correct guesses) must be at most r = {rr}, got {v!r}")
    return mm, rr, vv


# --------------------------------------------------------------------------- one run


def _p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Equation (2) on validated arguments."""
    from scipy import special, stats  # here: the CLI imports the package for its defaults

    if v == 0:
        return 1.0
    q = float(special.expit(epsilon))
    tail = float(stats.binom.sf(v - 1, r, q))  # f(v) = P[W >= v]
    if delta == 0.0:
        return min(1.0, tail)
    # P[v - i <= W < v] for i = 1..v: cumulative sums of pmf(v - 1), pmf(v - 2), ..., pmf(0)
    window = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
    alpha = float(np.max(window / np.arange(1, v + 1)))
    return min(1.0, tail + 2.0 * m * delta * alpha)


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float = 0.0) -> float:
    r"""The probability, under the hypothesis "the mechanism is (ε, δ)-DP", of at least
    ``v`` correct guesses out of ``r`` in a one-run audit with ``m`` canaries: equation (2)
    of this module (Steinke, Nasr & Jagielski 2023, Corollary 5.4 of arXiv:2305.08846v1),

    .. math::
        p_{\varepsilon,\delta}(v) = \min\Bigl(1,\; f_\varepsilon(v) + 2 m \delta
        \max_{1 \le i \le v} \frac{\Pr[v - i \le W < v]}{i}\Bigr),
        \quad W \sim \mathrm{Bin}\bigl(r, \tfrac{e^\varepsilon}{1 + e^\varepsilon}\bigr),

    with :math:`f_\varepsilon(v) = \Pr[W \ge v]`. A value ≤ β refutes (ε, δ)-DP at
    confidence 1 − β.

    Args:
        m (int): canaries, each included independently with probability 1/2.
        r (int): guesses made (the attacker abstains on the other m − r); r ≤ m.
        v (int): correct guesses; v ≤ r.
        epsilon (float): ε of the hypothesis; ≥ 0.
        delta (float, optional): δ of the hypothesis, in [0, 1). (default: :obj:`0.0`)

    Returns:
        float: the p-value, in (0, 1].

    Raises:
        PrivacyError: on an argument out of range (the message names it and its value).
    """
    mm, rr, vv = _one_run_counts(m, r, v)
    d = _delta(delta)
    eps = float(epsilon)
    if not (eps >= 0.0 and math.isfinite(eps)):
        raise PrivacyError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    return _p_value(mm, rr, vv, eps, d)


def one_run_epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0,
                                beta: float = DEFAULT_BETA) -> float:
    r"""The ε lower bound of a one-run audit (Steinke, Nasr & Jagielski 2023): the largest
    ε such that ``v`` correct guesses out of ``r`` would have probability ≤ β under every
    (ε, δ)-DP mechanism, equation (3) of this module,

    .. math::
        \hat\varepsilon = \sup\{\varepsilon \ge 0 : p_{\varepsilon,\delta}(v) \le \beta\},

    with :math:`p_{\varepsilon,\delta}` from :func:`one_run_p_value`; 0 when even ε = 0 is
    not refuted (e.g. r = 0, or no better than chance). Found by bisection that keeps the
    refuted side, to within :data:`EPSILON_TOLERANCE` below the supremum when 2mδ ≤ 1
    (where p is monotone in ε); for 2mδ > 1 the result is still refuted at level β but may
    lie below the supremum (see the module docstring). With δ = 0 it is the pure-DP bound:
    the ε at which :math:`\Pr[\mathrm{Bin}(r, e^\varepsilon/(1+e^\varepsilon)) \ge v] = \beta`.

    Args:
        m (int): canaries, each included independently with probability 1/2.
        r (int): guesses made (abstentions excluded); r ≤ m.
        v (int): correct guesses; v ≤ r.
        delta (float, optional): δ the bound is stated at, in [0, 1). (default: :obj:`0.0`)
        beta (float, optional): 1 − confidence, in (0, 1). (default: :obj:`0.05`)

    Returns:
        float: ε̂ ≥ 0; the mechanism is not (ε, δ)-DP for any ε < ε̂, at confidence 1 − β.

    Raises:
        PrivacyError: on an argument out of range (the message names it and its value).
    """
    mm, rr, vv = _one_run_counts(m, r, v)
    d, b = _delta(delta), _beta(beta)

    def refuted(eps: float) -> bool:
        return _p_value(mm, rr, vv, eps, d) <= b

    if not refuted(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while refuted(hi):  # p -> 1 as eps -> inf (q rounds to 1 by eps ~ 37), so this ends
        lo, hi = hi, 2.0 * hi
    while hi - lo > EPSILON_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if refuted(mid):
            lo = mid
        else:
            hi = mid
    return lo


def one_run_audit(m: int, r: int, v: int, delta: float = 0.0,
                  beta: float = DEFAULT_BETA) -> AuditBound:
    """:func:`one_run_epsilon_lower_bound` as an :class:`AuditBound`.

    Args:
        m (int): canaries, each included independently with probability 1/2.
        r (int): guesses made (abstentions excluded); r ≤ m.
        v (int): correct guesses; v ≤ r.
        delta (float, optional): δ the bound is stated at, in [0, 1). (default: :obj:`0.0`)
        beta (float, optional): 1 − confidence, in (0, 1). (default: :obj:`0.05`)

    Returns:
        AuditBound: method ``"one-run"``, counts ``m``, ``r``, ``v``.
    """
    eps = one_run_epsilon_lower_bound(m, r, v, delta, beta)
    return AuditBound(epsilon_lower=eps, confidence=1.0 - float(beta), method="one-run",
                      delta=float(delta), counts={"m": int(m), "r": int(r), "v": int(v)})


# --------------------------------------------------------------------------- multi run


def clopper_pearson(successes: int, trials: int,
                    beta: float = DEFAULT_BETA) -> tuple[float, float]:
    r"""The two-sided Clopper–Pearson interval at confidence 1 − β for a binomial
    proportion: each end holds with probability ≥ 1 − β/2,

    .. math::
        p_{lo} = B^{-1}\bigl(\tfrac{\beta}{2};\, x,\, n - x + 1\bigr), \qquad
        p_{hi} = B^{-1}\bigl(1 - \tfrac{\beta}{2};\, x + 1,\, n - x\bigr),

    with :math:`B^{-1}(\cdot; a, b)` the Beta quantile, p_lo = 0 when x = 0 and p_hi = 1
    when x = n.

    Args:
        successes (int): x, 0 ≤ x ≤ n.
        trials (int): n ≥ 1.
        beta (float, optional): 1 − confidence, in (0, 1). (default: :obj:`0.05`)

    Returns:
        tuple[float, float]: (p_lo, p_hi).
    """
    x, n = _count("successes", successes), _count("trials", trials)
    if n < 1:
        raise PrivacyError(f"trials must be at least 1, got {trials!r}")
    if x > n:
        raise PrivacyError(f"successes must be at most trials = {n}, got {successes!r}")
    from scipy import stats

    b = _beta(beta)
    lo = 0.0 if x == 0 else float(stats.beta.ppf(b / 2.0, x, n - x + 1))
    hi = 1.0 if x == n else float(stats.beta.ppf(1.0 - b / 2.0, x + 1, n - x))
    return lo, hi


def _log_ratio(numerator: float, denominator: float) -> float:
    if numerator <= 0.0:
        return 0.0
    return math.log(numerator / denominator)


def multi_run_epsilon_lower_bound(tp: int, fn: int, fp: int, tn: int, delta: float = 0.0,
                                  beta: float = DEFAULT_BETA) -> float:
    r"""The ε lower bound of a multi-run audit from the confusion counts of a membership
    test over R_in = TP + FN trainings with the canary and R_out = FP + TN without,
    equation (5) of this module:

    .. math::
        \hat\varepsilon = \max\Bigl(0,\;
        \log\frac{\mathrm{TPR}_{lo} - \delta}{\mathrm{FPR}_{hi}},\;
        \log\frac{\mathrm{TNR}_{lo} - \delta}{\mathrm{FNR}_{hi}}\Bigr),

    the rates bounded by the two-sided Clopper–Pearson intervals at confidence 1 − β
    (:func:`clopper_pearson`); both terms hold on one event of probability ≥ 1 − β.

    Args:
        tp (int): runs with the canary that the test called "in".
        fn (int): runs with the canary called "out"; tp + fn ≥ 1.
        fp (int): runs without the canary called "in".
        tn (int): runs without the canary called "out"; fp + tn ≥ 1.
        delta (float, optional): δ the bound is stated at, in [0, 1). (default: :obj:`0.0`)
        beta (float, optional): 1 − confidence, in (0, 1). (default: :obj:`0.05`)

    Returns:
        float: ε̂ ≥ 0.

    Raises:
        PrivacyError: on an argument out of range (the message names it and its value).
    """
    counts = {"tp": _count("tp", tp), "fn": _count("fn", fn),
              "fp": _count("fp", fp), "tn": _count("tn", tn)}
    if counts["tp"] + counts["fn"] < 1:
        raise PrivacyError(f"tp + fn (runs with the canary) must be at least 1, got {tp + fn!r}")
    if counts["fp"] + counts["tn"] < 1:
        raise PrivacyError(f"fp + tn (runs without the canary) must be at least 1, "
                           f"got {fp + tn!r}")
    d, b = _delta(delta), _beta(beta)
    r_in = counts["tp"] + counts["fn"]
    r_out = counts["fp"] + counts["tn"]
    tpr_lo, _ = clopper_pearson(counts["tp"], r_in, b)
    _, fpr_hi = clopper_pearson(counts["fp"], r_out, b)
    tnr_lo, _ = clopper_pearson(counts["tn"], r_out, b)  # = 1 - fpr_hi
    _, fnr_hi = clopper_pearson(counts["fn"], r_in, b)  # = 1 - tpr_lo
    return max(0.0, _log_ratio(tpr_lo - d, fpr_hi), _log_ratio(tnr_lo - d, fnr_hi))


def multi_run_audit(tp: int, fn: int, fp: int, tn: int, delta: float = 0.0,
                    beta: float = DEFAULT_BETA) -> AuditBound:
    """:func:`multi_run_epsilon_lower_bound` as an :class:`AuditBound`.

    Args:
        tp (int): runs with the canary that the test called "in".
        fn (int): runs with the canary called "out".
        fp (int): runs without the canary called "in".
        tn (int): runs without the canary called "out".
        delta (float, optional): δ the bound is stated at, in [0, 1). (default: :obj:`0.0`)
        beta (float, optional): 1 − confidence, in (0, 1). (default: :obj:`0.05`)

    Returns:
        AuditBound: method ``"multi-run"``, counts ``tp``, ``fn``, ``fp``, ``tn``.
    """
    eps = multi_run_epsilon_lower_bound(tp, fn, fp, tn, delta, beta)
    return AuditBound(epsilon_lower=eps, confidence=1.0 - float(beta), method="multi-run",
                      delta=float(delta),
                      counts={"tp": int(tp), "fn": int(fn), "fp": int(fp), "tn": int(tn)})


def largest_lower_bound(method: Method, counts: Mapping[str, int], delta: float = 0.0,
                        beta: float = DEFAULT_BETA) -> float:
    """The largest ε lower bound an audit of this size can show: the bound of the same
    audit had every guess been right (one-run: v = r; multi-run: no false positive or
    negative). A bound that reaches it says the attack won every guess: the audit's size,
    not the mechanism, capped it.

    Args:
        method (str): ``"one-run"`` or ``"multi-run"``.
        counts (Mapping[str, int]): the audit's counts (``m``, ``r``, ``v``; or ``tp``,
            ``fn``, ``fp``, ``tn``).
        delta (float, optional): δ the bound is stated at. (default: :obj:`0.0`)
        beta (float, optional): 1 − confidence. (default: :obj:`0.05`)
    """
    if method == "one-run":
        return one_run_epsilon_lower_bound(counts["m"], counts["r"], counts["r"], delta, beta)
    positives, negatives = counts["tp"] + counts["fn"], counts["fp"] + counts["tn"]
    return multi_run_epsilon_lower_bound(positives, 0, 0, negatives, delta, beta)
