"""Rényi-DP curves as pure functions of numbers (the bottom layer of the accountant).

Standard mechanisms are delegated to dp-accounting's ``RdpAccountant`` (its public ``rdp``
property). DP-GNN's hypergeometric amplification is not in any library, so it is written
here, in log space.

dp-accounting (which imports its PLD code and scipy.stats: about 1 s of CPU) is imported
when a function here first needs it (:func:`library`), not with this module: a cached run,
whose odometer reads RDP curves stored in the budget store, need not pay for it (issue 52
§7).
"""

from __future__ import annotations

import functools
import logging
import math
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln, log_ndtr, logsumexp

from dpgnn_core.privacy.events import PrivacyError, neighbourhood_size

FloatArray = npt.NDArray[np.float64]

#: Orders: fine near 1 (large-noise, node-level regimes need them), dense up to 64, sparse
#: up to 4096. Daigavane et al.'s code stops at 9.9.
DEFAULT_ORDERS: FloatArray = np.array(sorted(set(
    [1.001, 1.002, 1.005, 1.01, 1.02, 1.03, 1.05, 1.075]
    + [1 + x / 10.0 for x in range(1, 100)]
    + [float(x) for x in range(11, 64)]
    + [64.0, 80.0, 96.0, 128.0, 160.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 2048.0,
       4096.0]
)))


#: [dp-accounting's RDP module, its own _compute_log_a_int, its own _compute_log_a_frac]
_LIBRARY: list[Any] = []


def library() -> Any:
    """dp-accounting's ``rdp_privacy_accountant`` module, imported on first use, with
    :func:`poisson_log_a_int` and :func:`poisson_log_a_frac` installed in place of its
    ``_compute_log_a_int`` and ``_compute_log_a_frac``."""
    if not _LIBRARY:
        from dp_accounting.rdp import rdp_privacy_accountant as lib

        own = getattr(lib, "_dpgnn_own_log_a_int", lib._compute_log_a_int)
        own_frac = getattr(lib, "_dpgnn_own_log_a_frac", lib._compute_log_a_frac)
        lib._dpgnn_own_log_a_int = own  # kept across a reload of this module
        lib._dpgnn_own_log_a_frac = own_frac
        lib._compute_log_a_int = poisson_log_a_int
        lib._compute_log_a_frac = poisson_log_a_frac
        _LIBRARY.extend([lib, own, own_frac])
    return _LIBRARY[0]


def __getattr__(name: str) -> Any:
    """``_LIBRARY_LOG_A_INT`` / ``_LIBRARY_LOG_A_FRAC``: the library's own
    ``_compute_log_a_int`` / ``_compute_log_a_frac`` (before :func:`poisson_log_a_int` and
    :func:`poisson_log_a_frac` replaced them); ``dpa_rdp``: the library's module."""
    if name == "_LIBRARY_LOG_A_INT":
        library()
        return _LIBRARY[1]
    if name == "_LIBRARY_LOG_A_FRAC":
        library()
        return _LIBRARY[2]
    if name == "dpa_rdp":
        return library()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def poisson_log_a_int(q: float, sigma: float, alpha: int) -> Any:
    """dp-accounting's ``_compute_log_a_int`` (log A_α of the Poisson-subsampled Gaussian
    at an integer order, Mironov et al. 2019), bit for bit, with the α + 1 binomial terms
    computed as arrays: the library calls scipy's ``gammaln`` three times per term in
    Python (~14,000 terms per RDP curve with orders up to 4096, most of an RDP
    calibration's time). Each term is the same ufunc on the same float, and the same
    operations in the same order; the terms are then added in log space one by one, as
    the library does (``tests/dpgnn_core/privacy/test_pld_library.py`` compares them).
    Installed in place of the library's function when :func:`library` first imports it."""
    lib = library()
    if not isinstance(alpha, (int, np.integer)) or alpha < 0:
        return _LIBRARY[1](q, sigma, alpha)
    log1mq = math.log1p(-q)
    i = np.arange(alpha + 1, dtype=np.float64)
    log_comb = gammaln(alpha + 1) - gammaln(i + 1) - gammaln(alpha - i + 1)
    terms = (log_comb + i * math.log(q) + (alpha - i) * log1mq) + (i * i - i) / (
        2 * (sigma**2))
    log_a: Any = -np.inf
    add = lib._log_add
    for term in terms.tolist():
        log_a = add(log_a, term)
    return log_a


def poisson_log_a_frac(q: float, sigma: float, alpha: float) -> Any:
    """dp-accounting's ``_compute_log_a_frac`` (log A_α of the Poisson-subsampled Gaussian
    at a fractional order: the series of Mironov et al. 2019, §3.3, summed until its terms
    fall 30 nats below the total), bit for bit, with the terms computed as arrays,
    :data:`_FRAC_CHUNK` at a time: the library calls scipy's ``gammaln`` three times and
    ``log_ndtr`` twice per term in Python (~9 s of the suite's CPU). Each term is the same
    ufuncs on the same floats in the same order (a float ``i`` where the library has an
    int: the same values, exact below 2^53); the sums and the stopping rule are the
    library's, one term at a time, so it stops where the library stops, and it gives up
    with the library's warning and +inf after the same 1000 terms
    (``tests/dpgnn_core/privacy/test_pld_library.py`` compares them). Installed in place
    of the library's function when :func:`library` first imports it."""
    lib = library()
    alpha = float(alpha)
    z0 = sigma**2 * math.log(1 / q - 1) + 0.5
    log1mq = math.log1p(-q)
    log_q = math.log(q)
    log_half = math.log(0.5)
    log_two = math.log(2)
    root2_sigma = math.sqrt(2) * sigma
    two_var = 2 * (sigma**2)
    add = lib._log_add
    log_a0 = log_a1 = last_s0 = last_s1 = -np.inf
    steps = lib._MAX_STEPS_LOG_A_FRAC
    for start in range(0, steps, _FRAC_CHUNK):
        i = np.arange(start, min(start + _FRAC_CHUNK, steps), dtype=np.float64)
        log_coef = gammaln(alpha + 1) - gammaln(i + 1) - gammaln(alpha - i + 1)
        j = alpha - i
        log_t0 = log_coef + i * log_q + j * log1mq
        log_t1 = log_coef + j * log_q + i * log1mq
        # the library's _log_erfc(x) is log(2) + log_ndtr(-x * 2**0.5)
        log_e0 = log_half + (log_two + log_ndtr(-((i - z0) / root2_sigma) * 2**0.5))
        log_e1 = log_half + (log_two + log_ndtr(-((z0 - j) / root2_sigma) * 2**0.5))
        log_s0s = (log_t0 + (i * i - i) / two_var + log_e0).tolist()
        log_s1s = (log_t1 + (j * j - j) / two_var + log_e1).tolist()
        for log_s0, log_s1 in zip(log_s0s, log_s1s, strict=True):
            log_a0 = add(log_a0, log_s0)
            log_a1 = add(log_a1, log_s1)
            total = add(log_a0, log_a1)
            if log_s0 < last_s0 and log_s1 < last_s1 and max(log_s0, log_s1) < total - 30:
                return total
            last_s0, last_s1 = log_s0, log_s1
    lib.logging.warning(  # not converged: the library's warning (absl), and +inf
        "_compute_log_a_frac failed to converge after %d iterations with q=%f"
        ", sigma=%f, alpha=%f. Excluding this order from the epsilon "
        "computation.", steps, q, sigma, alpha)
    return np.inf


#: Terms of :func:`poisson_log_a_frac`'s series computed at once (most orders and rates
#: stop within 30-100 terms).
_FRAC_CHUNK = 64

#: Smallest order at which the Poisson-subsampled Gaussian is evaluated (see below).
POISSON_MIN_ORDER = 1.5


def rdp_gaussian(noise_multiplier: float, orders: FloatArray = DEFAULT_ORDERS,
                 count: int = 1) -> FloatArray:
    """RDP of ``count`` Gaussian releases with noise std / sensitivity = ``noise_multiplier``.

    .. math::
        \\varepsilon(\\alpha) = \\text{count} \\cdot \\alpha / (2 z^2)
    """
    out: FloatArray = count * np.asarray(orders, dtype=np.float64) / (2.0 * noise_multiplier**2)
    return out


def rdp_poisson_gaussian(sampling_rate: float, noise_multiplier: float, steps: int,
                         orders: FloatArray = DEFAULT_ORDERS) -> FloatArray:
    """RDP of ``steps`` Poisson-subsampled Gaussian releases (add/remove), Mironov et al.
    (2019), through dp-accounting.

    Orders below :data:`POISSON_MIN_ORDER` are reported as +inf (unused): dp-accounting's
    fractional-order series does not converge there for common rates and would exclude them
    anyway, with a warning per order. An unused order can only raise ε, never lower it.
    """
    orders = np.asarray(orders, dtype=np.float64)
    out = np.full(orders.shape, np.inf)
    usable = orders >= POISSON_MIN_ORDER
    if usable.any():
        # dp-accounting composes T steps as 0 + T · (one step's RDP): the same numbers
        one = _poisson_gaussian_step_rdp(float(sampling_rate), float(noise_multiplier),
                                         tuple(float(o) for o in orders[usable]))
        out[usable] = int(steps) * one
    return out


@functools.lru_cache(maxsize=256)
def _poisson_gaussian_step_rdp(sampling_rate: float, noise_multiplier: float,
                               orders: tuple[float, ...]) -> FloatArray:
    """One Poisson-subsampled Gaussian step's RDP by dp-accounting (read-only; cached: a
    calibration or an ε-by-step curve asks for the same step at many step counts)."""
    from dp_accounting import dp_event

    acc = library().RdpAccountant(list(orders))
    # dp-accounting logs a warning for each fractional order whose series does not
    # converge and excludes it (+inf), as we would; the message would repeat at every
    # bisection step of a calibration, so it is held back for this call only.
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        acc.compose(dp_event.PoissonSampledDpEvent(
            sampling_rate, dp_event.GaussianDpEvent(noise_multiplier)), 1)
    finally:
        absl.setLevel(level)
    one: FloatArray = np.array(acc.rdp, dtype=np.float64)
    one.flags.writeable = False
    return one


def rdp_uniform_gaussian(sampling_rate: float, noise_multiplier: float, steps: int,
                         orders: FloatArray = DEFAULT_ORDERS) -> FloatArray:
    """RDP of ``steps`` Gaussian releases on fixed-size batches drawn without replacement
    (replace-one; Wang, Balle, Kasiviswanathan 2019, Thm. 27), through dp-accounting.

    dp-accounting takes the population and sample sizes; ``sampling_rate`` is written as an
    exact fraction m/n for it.

    dp-accounting evaluates a fractional order by interpolating the log-moment between the
    two neighbouring integer orders (WBK Cor. 10), recomputing both for every order; the
    same interpolation is done here from one evaluation per distinct integer order, which
    gives identical values (calibration evaluates this curve 15-20 times). Orders above
    :data:`UNIFORM_MAX_ORDER` are +inf (unused).
    """
    orders = np.asarray(orders, dtype=np.float64)
    result = np.full(orders.shape, np.inf)
    usable = orders <= UNIFORM_MAX_ORDER
    if not usable.any():
        return result
    result[usable] = _uniform_gaussian_low(sampling_rate, noise_multiplier, steps,
                                           orders[usable])
    return result


#: Largest order at which the sampled-without-replacement Gaussian is evaluated. Its exact
#: series costs O(α²) per order (0.35 s of a 0.5 s curve went to the orders above 64);
#: the best order is 1 + log(1/δ)/ε or so, below 64 whenever ε > log(1/δ)/63 (0.33 at
#: δ = 1e-9). Above it the order is unused (+inf), which can only raise ε.
UNIFORM_MAX_ORDER = 64.0


def _uniform_gaussian_low(sampling_rate: float, noise_multiplier: float, steps: int,
                          orders: FloatArray) -> FloatArray:
    frac = Fraction(sampling_rate).limit_denominator(10**12)
    lo, hi = np.floor(orders).astype(np.int64), np.ceil(orders).astype(np.int64)
    ints = sorted({int(v) for v in np.concatenate([lo, hi]) if v >= 2})
    # what dp-accounting's RdpAccountant(ints, REPLACE_ONE) composes for
    # SampledWithoutReplacementDpEvent(n, m, GaussianDpEvent(z)) ``steps`` times
    rdp = np.zeros(len(ints), dtype=np.float64)
    rdp += int(steps) * wor_gaussian_rdp(frac.numerator / frac.denominator,
                                         float(noise_multiplier), tuple(ints))
    log_a = {1: 0.0}  # (α - 1)·RDP(α): the composed log-moment at integer orders
    log_a.update({a: (a - 1) * float(r) for a, r in zip(ints, rdp, strict=True)})
    t = orders - lo
    out: FloatArray = (((1 - t) * np.array([log_a[int(v)] for v in lo])
                        + t * np.array([log_a[int(v)] for v in hi])) / (orders - 1))
    return out


def wor_gaussian_rdp(q: float, sigma: float, orders: tuple[int, ...]) -> FloatArray:
    """dp-accounting's ``_compute_rdp_sample_wor_gaussian(q, sigma, orders)`` (one step's
    RDP, WBK Thm. 27) at integer orders, bit for bit, with the forward differences of the
    Gaussian's CGF computed once for the largest order instead of once per order.

    The library recomputes them for every order (O(α²) each, ~90 % of a DRW calibration).
    The i-th difference at 0 depends only on the CGF at 0..i+1 and is computed by the
    same operations whatever the number of differences asked for, so the differences for
    order α are a prefix of those for the largest order: the same floats
    (``tests/dpgnn_core/privacy/test_pld_library.py`` compares every order with the library's).
    Orders beyond the library's exact range (256), q in {0, 1} or σ ≤ 0 go to the library.
    """
    top = max(orders, default=0)
    if not 0 < q < 1 or not sigma > 0 or top > 256 or min(orders, default=2) < 2:
        return np.asarray(library()._compute_rdp_sample_wor_gaussian(
            q, sigma, [float(a) for a in orders]), dtype=np.float64)

    deltas, _ = library()._get_forward_diffs(functools.partial(_gaussian_cgf, sigma=sigma), top)
    return np.array([_wor_log_a(q, sigma, a, deltas) / (float(a) - 1) for a in orders])


def _gaussian_cgf(x: float, sigma: float) -> float:
    """The library's CGF of the Gaussian mechanism in ``_compute_rdp_sample_wor_gaussian_int``
    (the same expression, so the same floats)."""
    return x * 1.0 * (x + 1) / (2.0 * sigma**2)


def _wor_log_a(q: float, sigma: float, alpha: int, deltas: FloatArray) -> float:
    """dp-accounting's ``_compute_rdp_sample_wor_gaussian_int`` for 2 ≤ α ≤ 256, given the
    forward differences (the same statements in the same order)."""
    def cgf(x: float) -> float:
        return _gaussian_cgf(x, sigma)

    def func(x: float) -> float:
        return 1.0 * x / (2.0 * sigma**2)

    lib = library()
    log_a: Any = 0
    log_f2m1 = func(2.0) + math.log1p(-np.exp(-func(2.0)))
    for i in range(2, alpha + 1):
        if i == 2:
            s = (2 * np.log(q) + lib._log_comb(alpha, 2)
                 + np.minimum(np.log(4) + log_f2m1, func(2.0) + np.log(2)))
        else:
            delta_lo = deltas[int(2 * np.floor(i / 2.0)) - 1]
            delta_hi = deltas[int(2 * np.ceil(i / 2.0)) - 1]
            s = np.log(4) + 0.5 * (delta_lo + delta_hi)
            s = np.minimum(s, np.log(2) + cgf(i - 1))
            s += i * np.log(q) + lib._log_comb(alpha, i)
        log_a = lib._log_add(log_a, s)
    return float(log_a)


@functools.lru_cache(maxsize=64)
def hypergeometric_log_pmf(num_train: int, occurrences: int, batch_size: int
                           ) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Support and log-pmf of :math:`\\rho \\sim \\mathrm{Hypergeometric}(N, N(K,r), m)`.

    A node cannot occur in more subgraphs than there are (N), so the number of "marked"
    subgraphs is ``min(N(K,r), N)``.
    """
    marked = min(occurrences, num_train)
    k = np.arange(max(0, batch_size + marked - num_train), min(batch_size, marked) + 1,
                  dtype=np.int64)
    from scipy.stats import hypergeom

    logp = np.asarray(hypergeom.logpmf(k, num_train, marked, batch_size), dtype=np.float64)
    return k, logp


def rdp_dpgnn(noise_multiplier: float, num_train: int, batch_size: int, max_degree: int,
              layers: int, steps: int = 1, orders: FloatArray = DEFAULT_ORDERS,
              marked: int | None = None) -> FloatArray:
    """DP-GNN's RDP (Daigavane et al., Thm. 1), composed over ``steps``.

    .. math::
        \\gamma(\\alpha) = \\frac{1}{\\alpha - 1} \\ln \\mathbb{E}_{\\rho}\\left[
        \\exp\\left(\\frac{\\alpha(\\alpha-1)\\rho^2}{2\\lambda^2 N(K,r)^2}\\right)\\right],
        \\quad \\rho \\sim \\mathrm{Hypergeometric}(N, M, m)

    with M = N(K,r) marked subgraphs (the theorem), or M = 2N(K,r) - 1 when one change can
    touch the subgraphs holding the node in either graph (``marked``), evaluated as a
    log-sum-exp over the support of ρ, so it neither overflows for large
    orders nor loses the tail for large N. With m = N it is the Gaussian
    :math:`\\alpha / (2\\lambda^2)`; with N(K,r) = 1 it is a single record sampled without
    replacement.

    Args:
        noise_multiplier (float): λ = σ / (2C · N(K,r)).
        num_train (int): N, training nodes (subgraphs).
        batch_size (int): m, subgraphs per step.
        max_degree (int): K, the sampled in-degree bound.
        layers (int): r, message-passing layers.
        steps (int, optional): T. (default: :obj:`1`)
        orders (np.ndarray, optional): Rényi orders > 1.
        marked (int, optional): M, marked subgraphs. (default: N(K,r))
    """
    if noise_multiplier <= 0:
        raise PrivacyError(f"noise multiplier must be > 0, got {noise_multiplier}")
    if not 1 <= batch_size <= num_train:
        raise PrivacyError(f"batch size m={batch_size} must lie in [1, N={num_train}]")
    occ = neighbourhood_size(max_degree, layers)
    k, logp = hypergeometric_log_pmf(int(num_train), int(marked or occ), int(batch_size))
    a = np.asarray(orders, dtype=np.float64)[:, None]
    expo = a * (a - 1.0) * (k[None, :].astype(np.float64) ** 2) / (
        2.0 * noise_multiplier**2 * float(occ) ** 2)
    return steps * _log_mean_exp(logp, expo) / (a[:, 0] - 1.0)


def _log_mean_exp(logp: FloatArray, expo: FloatArray) -> FloatArray:
    """``log(sum_k p_k exp(expo[:, k]) / sum_k p_k)`` per row, accurate at both ends.

    For a large N the result can be ~1e-8 while the pmf sums to 1 only to ~1e-10: so
    small rows use ``log1p(sum_k p_k expm1(x_k) / sum p)`` (the k = 0 term is exactly 0
    and the pmf's rounding cancels), rows that would overflow use a normalised
    log-sum-exp.
    """
    log_norm = float(logsumexp(logp))
    w = np.exp(logp - log_norm)
    out = np.empty(expo.shape[0])
    small = expo.max(axis=1) < 50.0
    if small.any():
        out[small] = np.log1p(np.expm1(expo[small]) @ w)
    if (~small).any():
        out[~small] = logsumexp(logp[None, :] + expo[~small], axis=1) - log_norm
    return out


def epsilon_from_rdp(orders: FloatArray, rdp: FloatArray, delta: float) -> tuple[float, float]:
    """(ε, optimal order) from an RDP curve, with the tight conversion of Canonne, Kamath
    and Steinke (2020) as dp-accounting implements it."""
    eps, order = library().compute_epsilon(list(orders), list(rdp), delta)
    return float(eps), float(order)


def delta_from_rdp(orders: FloatArray, rdp: FloatArray, epsilon: float) -> tuple[float, float]:
    """(δ, optimal order) from an RDP curve (dp-accounting's tight conversion)."""
    delta, order = library().compute_delta(list(orders), list(rdp), epsilon)
    return float(delta), float(order)


def deltas_from_rdp(orders: FloatArray, rdp: FloatArray, epsilons: FloatArray) -> FloatArray:
    """δ at each of ``epsilons`` from one RDP curve (orders > 1, values >= 0 or +inf):
    dp-accounting's ``compute_delta`` (:func:`delta_from_rdp`), the same formulas
    evaluated for every (ε, order) pair as one array.

    Why by hand: the Poisson tuning bound (:func:`~dpgnn_core.privacy.tuning.tuning_rdp`)
    needs δ at one ε per order, and the library's Python loop over the orders made that
    ~190² iterations per curve (7 s of the core tests' CPU). numpy's ``exp``/``log1p``
    may round differently from ``math``'s in the last place: the results agree with the
    library's to 1e-15 relative (``tests/dpgnn_core/privacy/test_rdp.py``), far inside
    the conversion's own slack.
    """
    a = np.asarray(orders, dtype=np.float64)[None, :]
    r = np.asarray(rdp, dtype=np.float64)[None, :]
    e = np.asarray(epsilons, dtype=np.float64)[:, None]
    if (a <= 1).any() or (r < 0).any() or np.isnan(r).any():
        raise PrivacyError("an RDP curve needs orders > 1 and values >= 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(r == 0, -np.inf, 0.5 * np.log1p(-np.exp(-r)))  # δ <= sqrt(1-e^-KL)
        bound = (a - 1) * (r - e + np.log1p(-1 / a)) - np.log(a)
    log_delta = np.where(a > 1.01, np.minimum(kl, bound), kl)
    out: FloatArray = np.minimum(np.exp(log_delta.min(axis=1)), 1.0)
    return out
