"""Privacy-loss-distribution (PLD) curves, through dp-accounting's PLD library.

DP-GNN under PLD: the dominating pair
-------------------------------------
One step of DP-GNN releases :math:`\\sum_{i \\in S} g_i + Z`, :math:`Z \\sim
\\mathcal{N}(0, \\sigma^2 I)`, for a batch S of m of the N training subgraphs drawn uniformly
without replacement. Replacing one node u changes the gradients of the subgraphs that
contain u (at most N(K,r) of them), each by at most 2C. Couple the two neighbouring runs on
the same S, and let :math:`\\rho = |S \\cap \\mathrm{Occ}(u)| \\sim
\\mathrm{Hypergeometric}(N, N(K,r), m)` (in the worst case u occurs in exactly N(K,r)
subgraphs; fewer only lowers ρ stochastically). Given S, the outputs are
:math:`\\mathcal{N}(a_S, \\sigma^2 I)` and :math:`\\mathcal{N}(b_S, \\sigma^2 I)` with
:math:`\\|a_S - b_S\\| \\le 2C\\rho`.

Reveal ρ in addition to the output: the real mechanism is a post-processing (forgetting
ρ) of the revealed one, so any dominating pair of the revealed mechanism dominates it. The
revealed mechanism's outputs are :math:`(\\rho, \\mathcal{N}(a_S, \\sigma^2 I))` vs
:math:`(\\rho, \\mathcal{N}(b_S, \\sigma^2 I))`, with the same law of ρ on both sides, and
for each ρ the Gaussian pair is dominated (rotation and translation invariance, and
monotonicity of the Gaussian's hockey-stick divergence in the shift) by
:math:`\\mathcal{N}(0, \\sigma^2)` vs :math:`\\mathcal{N}(2C\\rho, \\sigma^2)` in one
dimension. Hence the pair

.. math::
    P = \\sum_k p_k \\, \\delta_k \\otimes \\mathcal{N}(0, \\sigma^2), \\qquad
    Q = \\sum_k p_k \\, \\delta_k \\otimes \\mathcal{N}(2Ck, \\sigma^2)

dominates one step, for both directions of the replacement (the pair is symmetric). Its
privacy loss is a mixture over k of Gaussian privacy losses
:math:`\\mathcal{N}(\\mu_k, 2\\mu_k)`, :math:`\\mu_k = k^2 / (2\\lambda^2 N(K,r)^2)`.
Its Rényi divergence is exactly Daigavane et al.'s Theorem 1, so the PLD is the exact
(ε, δ) curve of the very pair the RDP bound describes, and never exceeds the RDP bound
(up to the pessimistic discretisation, which only rounds losses up).

Why not dp-accounting's ``MixtureOfGaussiansDpEvent``: it models
:math:`\\mathcal{N}(0, \\sigma^2)` against :math:`\\sum_k p_k \\mathcal{N}(c_k, \\sigma^2)`
with ρ hidden. That pair needs one side of the neighbouring pair to be a single Gaussian
(add/remove where the removed record contributes nothing); under DP-GNN's replace-one
relation both sides are mixtures over S, and the hidden-ρ pair is not shown to dominate.
The revealed-ρ mixture of loss distributions is discretised here by hand for that reason.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np
import numpy.typing as npt
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy.special import log_ndtr, ndtr

from dpgnn_core.privacy import pld_library  # installs the fast helpers; check_grid
from dpgnn_core.privacy.events import (
    DpgnnEvent,
    GaussianEvent,
    PoissonGaussianEvent,
    PrivacyError,
    PrivacyEvent,
)
from dpgnn_core.privacy.rdp import hypergeometric_log_pmf

# dp-accounting ships no type information: its PLD objects are typed Any here.
PLD = Any


_TAIL_SD = 12.0  # mass beyond 12 standard deviations (< 1e-32) goes to +inf (pessimistic)


def _gaussian_mixture_delta(eps: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    r"""Hockey-stick divergence of the revealed-ρ pair at each ``eps``:
    :math:`\delta(\varepsilon) = \sum_k p_k [\Phi(a_k/2 - \varepsilon/a_k)
    - e^{\varepsilon}\Phi(-a_k/2 - \varepsilon/a_k)]`, and :math:`(1 - e^\varepsilon)_+`
    for :math:`a_k = 0`."""
    out = np.zeros_like(eps)
    for pk, ak in zip(p, a, strict=True):
        if pk == 0.0:
            continue
        if ak == 0.0:
            out += pk * np.maximum(0.0, -np.expm1(eps))
            continue
        first = ndtr(ak / 2.0 - eps / ak)
        second = np.exp(eps + log_ndtr(-ak / 2.0 - eps / ak))
        out += pk * np.maximum(0.0, first - second)
    return out


def pld_dpgnn_step(noise_multiplier: float, num_train: int, batch_size: int, occurrences: int,
                   value_discretization_interval: float = 1e-4, marked: int | None = None
                   ) -> PLD:
    r"""PLD of one DP-GNN step for the revealed-ρ dominating pair (module docstring).

    Discretised by "connect the dots" (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, 2022):
    the grid-supported PLD whose hockey-stick curve equals the pair's exact curve
    :math:`\delta(\varepsilon)` at every grid point, and so bounds it from above between
    them (δ of a grid PLD is convex in e^ε between grid points). Losses above the grid go
    to +infinity. Plain rounding up would bias ε by up to T·Δ over T steps.

    ``marked`` (M, default N(K,r)) is the number of subgraphs one change can touch; the
    noise std stays λ·2C·N(K,r), so a revealed ρ = k shifts the mean by k / (λ N(K,r)).
    """
    k, logp = hypergeometric_log_pmf(num_train, marked or occurrences, batch_size)
    p = np.exp(logp)
    a = k.astype(np.float64) / (noise_multiplier * occurrences)  # shift / noise std
    mu, sd = a**2 / 2.0, a
    d = value_discretization_interval
    top = float(np.max(mu + _TAIL_SD * sd))
    hi = int(np.ceil(max(top, d) / d))
    lo = -hi  # losses under the pair are symmetric about their mean; the floor absorbs the rest
    n_points = hi - lo + 1
    if n_points * int((p > 0).sum()) > 50_000_000:
        raise PrivacyError(f"PLD grid of {n_points} points x {int((p > 0).sum())} mixture "
                           "components: raise value_discretization_interval or use the RDP "
                           "accountant")
    eps = (lo + np.arange(n_points)) * d
    delta = _gaussian_mixture_delta(eps, p, a)
    # delta_j = A_j - exp(eps_j) B_j with A_j = w_inf + sum_{i>j} w_i and
    # B_j = sum_{i>j} w_i exp(-eps_i); eliminating B gives
    # A_j = (delta_j - exp(-d) delta_{j+1}) / (1 - exp(-d)), A_n = w_inf, w_{j+1} = A_j - A_{j+1}.
    w_inf = float(delta[-1])
    big_a = np.empty(n_points)
    big_a[-1] = w_inf
    big_a[:-1] = (delta[:-1] - np.exp(-d) * delta[1:]) / -np.expm1(-d)
    w = np.empty(n_points)
    w[1:] = big_a[:-1] - big_a[1:]
    w[0] = 1.0 - big_a[0]
    # Rounding leaves entries of order 1e-16 / d below zero; they carry no mass.
    w = np.maximum(w, 0.0)
    return _pld_from_grid(w, lo, w_inf, d)


def _pld_from_grid(w: npt.NDArray[np.float64], lo: int, w_inf: float, d: float) -> PLD:
    """The symmetric pessimistic PLD with mass ``w[i]`` on loss ``(lo + i) * d`` (zero and
    negative entries carry none): what ``create_from_rounded_probability`` makes of the dict
    ``{lo + i: w[i]}`` of the positive entries, built from the array directly. The dict
    round trip (a Python dict of every grid point, then a Python list back) was a third of
    a DP-GNN step's PLD; a sparse PMF, or a library without these classes, takes it."""
    nz = np.flatnonzero(w > 0)
    dense = getattr(pld_pmf, "DensePLDPmf", None)
    limit = getattr(pld_pmf, "_MAX_PMF_SPARSE_SIZE", None)
    if dense is None or limit is None or len(nz) <= limit:
        rounded = {lo + int(i): float(w[i]) for i in nz}
        return pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
            rounded, w_inf, d, pessimistic_estimate=True)
    # dictionary_to_list: from the smallest key to the largest, 0 where a key is missing
    first, last = int(nz[0]), int(nz[-1])
    part = w[first:last + 1]
    probs = np.where(part > 0, part, 0.0).astype(np.float64)
    pmf = dense(d, lo + first, probs, w_inf, True)
    return pld_lib.PrivacyLossDistribution(pmf)


class _VectorisedGaussianPrivacyLoss(plm.GaussianPrivacyLoss):  # type: ignore[misc]
    """dp-accounting's Gaussian privacy loss (add/remove, optionally Poisson-subsampled)
    with ``get_delta_for_epsilon`` vectorised.

    The library inverts the privacy loss one ε at a time in Python: about 48,000 calls
    (0.2 s) for one subsampled step on the 1e-4 grid, most of a calibration's time. Here the
    same closed forms (its ``_inverse_privacy_loss_add/remove`` with
    ``log_a_times_exp_b_plus_c``, in the same floating-point order) run on the whole array;
    a test checks that the resulting PLD equals the library's.
    """

    def _inverse_privacy_loss_vec(self, eps: np.ndarray) -> np.ndarray:
        s, var, q = self.sensitivity, self._standard_deviation ** 2, self.sampling_prob

        def remove(loss: np.ndarray) -> np.ndarray:  # without subsampling
            return np.asarray(-0.5 * s - loss * var / s)

        if q == 1.0:
            out: np.ndarray = (remove(eps) if self.adjacency_type != plm.AdjacencyType.ADD
                               else s + remove(eps))
            return out
        a, c = 1 / q, 1 - 1 / q  # log(a e^b + c), c < 0: _log_sub(b + log a, log(-c))
        log_neg_c = np.log(-c)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.adjacency_type == plm.AdjacencyType.REMOVE:
                d = eps + np.log(a)
                x = remove(d + np.log1p(-np.exp(log_neg_c - d)))
                x[np.isclose(eps, math.log(1 - q), rtol=1e-9, atol=0.0)] = math.inf
                return x
            d = -eps + np.log(a)
            y: np.ndarray = s + remove(-(d + np.log1p(-np.exp(log_neg_c - d))))
            y[np.isclose(eps, -math.log(1 - q), rtol=1e-9, atol=0.0)] = -math.inf
            return y

    def get_delta_for_epsilon(self, epsilon: Any) -> Any:
        # dp-accounting's AdditiveNoisePrivacyLoss.get_delta_for_epsilon, vectorised.
        is_scalar = isinstance(epsilon, numbers.Number)
        epsilons = np.array([epsilon]) if is_scalar else np.asarray(epsilon)
        deltas = np.zeros_like(epsilons, dtype=float)
        if self.sampling_prob == 1.0:
            inverse = np.full_like(epsilons, True, dtype=bool)
        elif self.adjacency_type == plm.AdjacencyType.ADD:
            inverse = epsilons < -math.log1p(-self.sampling_prob)
        elif self.adjacency_type == plm.AdjacencyType.REMOVE:
            inverse = epsilons > math.log1p(-self.sampling_prob)
            other = np.logical_not(inverse)
            deltas[other] = -np.expm1(epsilons[other])
        else:
            raise ValueError(f"{self.adjacency_type} adjacency type is not supported.")
        x = self._inverse_privacy_loss_vec(epsilons[inverse].astype(np.float64))
        deltas[inverse] = (self.mu_upper_cdf(x)
                           - np.exp(epsilons[inverse] + self.mu_lower_log_cdf(x)))
        deltas = np.clip(deltas, 0, 1)
        return float(deltas[0]) if is_scalar else deltas


def gaussian_pld(noise_multiplier: float, sampling_rate: float = 1.0,
                 value_discretization_interval: float = 1e-4) -> PLD:
    """PLD of one (Poisson-subsampled) Gaussian release under add/remove, sensitivity 1:
    dp-accounting's ``from_gaussian_mechanism`` (pessimistic, connect the dots), with the
    hockey-stick curve evaluated vectorised (:class:`_VectorisedGaussianPrivacyLoss`)."""
    create = getattr(pld_lib, "_create_pld_pmf_from_monotone_privacy_loss", None)
    subsampled = getattr(pld_lib, "_pld_for_subsampled_mechanism", None)
    if create is None or subsampled is None:  # pragma: no cover - another dp-accounting
        return pld_lib.from_gaussian_mechanism(
            noise_multiplier, sampling_prob=sampling_rate,
            value_discretization_interval=value_discretization_interval)

    def single(adjacency: Any) -> Any:
        loss = _VectorisedGaussianPrivacyLoss(
            noise_multiplier, sensitivity=1, pessimistic_estimate=True,
            log_mass_truncation_bound=-50, sampling_prob=sampling_rate,
            adjacency_type=adjacency)
        bounds = loss.connect_dots_bounds()  # the grid the library builds next
        span = (bounds.epsilon_upper - bounds.epsilon_lower) / value_discretization_interval
        pld_library.check_grid(int(min(span, 1e30)) + 2,
                               f"one step at noise multiplier {noise_multiplier:g}")
        return create(loss, pessimistic_estimate=True,
            value_discretization_interval=value_discretization_interval,
            use_connect_dots=True)

    return subsampled(single, sampling_rate)


# PLDs are cached by the numbers that define them (not the event's description): a
# calibration or a budget curve evaluates the same step, or the same composed event,
# many times (GAP's encoder and classifier are often the same event). dp-accounting's PLD
# methods return new objects and never modify their operands.
@functools.lru_cache(maxsize=16)
def _step_pld(kind: str, params: tuple[Any, ...], d: float) -> PLD:
    if kind == "gaussian":
        return gaussian_pld(params[0], 1.0, d)
    if kind == "poisson_gaussian":
        return gaussian_pld(params[0], params[1], d)
    z, n, m, occ, marked = params
    return pld_dpgnn_step(z, n, m, occ, d, marked=marked)


@functools.lru_cache(maxsize=8)
def _composed_pld(kind: str, params: tuple[Any, ...], count: int, d: float) -> PLD:
    base = _step_pld(kind, params, d)
    return base.self_compose(count) if count > 1 else base


EventKey = tuple[str, tuple[Any, ...], int]


def event_key(event: PrivacyEvent) -> EventKey:
    """The numbers that define an event's PLD: (kind, step parameters, steps)."""
    if isinstance(event, GaussianEvent):
        return "gaussian", (float(event.noise_multiplier),), int(event.count)
    if isinstance(event, PoissonGaussianEvent):
        return ("poisson_gaussian", (float(event.noise_multiplier), float(event.sampling_rate)),
                int(event.steps))
    if isinstance(event, DpgnnEvent):
        return ("dpgnn", (float(event.noise_multiplier), int(event.num_train),
                          int(event.batch_size), int(event.occurrences),
                          int(event.marked_subgraphs)), int(event.steps))
    raise PrivacyError(f"the PLD accountant does not analyse {event.kind} events "
                       "(dp-accounting has no PLD for sampling without replacement); "
                       "use the RDP accountant")


def composed_pld(keys: tuple[EventKey, ...], value_discretization_interval: float) -> PLD:
    """The PLD of events (by :func:`event_key`) composed in order."""
    out = None
    for key in keys:
        p = _composed_pld(*key, float(value_discretization_interval))
        out = p if out is None else out.compose(p)
    return out


# ε is cached by the events' numbers too (a float each): the PLD cache holds 8 composed
# events, fewer than a calibration's evaluations, so a run that calibrates the same plan
# again (a resumed run, a twin, a test) recomputed every PLD. The answer is a pure function
# of the numbers, so a cached ε is the one the computation gives.
@functools.lru_cache(maxsize=4096)
def epsilon_for_events(keys: tuple[EventKey, ...], value_discretization_interval: float,
                       delta: float) -> float:
    """ε for ``delta`` of the events (by :func:`event_key`) composed in order."""
    return epsilon_for_delta(composed_pld(keys, value_discretization_interval), delta)


# --- ε for δ, vectorised -------------------------------------------------------------------
# dp-accounting's dense PMF answers "smallest ε with δ(ε) ≤ δ" with a Python loop over every
# grid point above ε (``pld_pmf._get_epsilon_for_delta``): hundreds of thousands of steps
# per call at the default grid of 1e-4, and calibration and the ε-by-step curve call it tens
# of times per run (77 % of the CPU of the heaviest tests went there). The same scan, as
# cumulative sums in numpy, follows; a sparse PMF, or a library whose PMF does not have the
# fields read here, falls back to dp-accounting's own method.
def epsilon_for_delta(pld: Any, delta: float) -> float:
    """The smallest ε ≥ 0 at which the hockey-stick divergence of ``pld`` (a dp-accounting
    ``PrivacyLossDistribution``) is at most ``delta``; ``inf`` if none. Equal to
    ``pld.get_epsilon_for_delta(delta)`` up to floating-point rounding (the tests compare
    them on adversarial distributions)."""
    eps = _pmf_epsilon(pld._pmf_remove, delta)
    if pld._symmetric:
        return eps
    return max(eps, _pmf_epsilon(pld._pmf_add, delta))


def _pmf_epsilon(pmf: Any, delta: float) -> float:
    from dp_accounting.pld.pld_pmf import DensePLDPmf

    try:
        if not isinstance(pmf, DensePLDPmf):
            raise AttributeError("sparse")
        probs = np.asarray(pmf._probs, dtype=np.float64)[::-1]
        top = (pmf._lower_loss + len(probs) - 1) * pmf._discretization
        step, infinity_mass = float(pmf._discretization), float(pmf._infinity_mass)
    except AttributeError:
        return float(pmf.get_epsilon_for_delta(delta))
    return _scan(infinity_mass, top, step, probs, delta)


#: Grid points :func:`_scan` reads in its first chunk (each next chunk is twice as long).
SCAN_CHUNK = 1 << 14


def _scan(infinity_mass: float, top: float, step: float,
          probs: npt.NDArray[np.float64], delta: float) -> float:
    """dp-accounting's scan from the largest loss down, in closed form: before grid point
    k the masses are U = m∞ + Σ_{i<k} p_i and L = Σ_{i<k} e^{-ℓ_i} p_i; the scan stops at
    the first k with U > δ, L > 0 and log((U - δ)/L) ≥ ℓ_k (ε = that log), or returns
    max(0, ℓ_k) at the first k where U ≥ δ while L underflows to 0 after adding p_k.

    The losses ℓ_k are the library's ``itertools.count(top, -step)`` (repeated
    subtraction). The sums are taken in chunks from the top, the first of
    :data:`SCAN_CHUNK` points and each next one twice as long, and the scan ends in the
    chunk where it stops: it stops about where δ is reached, often well before the
    bottom of a grid of 10^5-10^6 points. Each chunk's running sums start from the last
    one's (a cumulative sum is sequential), so every U, L and ℓ_k is the float a single
    pass over the whole grid gives."""
    if infinity_mass > delta:
        return math.inf
    n = len(probs)
    carry_u, carry_l, head = infinity_mass, 0.0, top  # head: the chunk's first loss
    start, size = 0, SCAN_CHUNK
    while start < n:
        end = min(n, start + size)
        p = probs[start:end]
        losses = np.cumsum(np.concatenate(([head], np.full(end - start - 1, -step))))
        upper = np.cumsum(np.concatenate(([carry_u], p)))  # upper[i]: before point start+i
        lower = np.cumsum(np.concatenate(([carry_l], np.exp(-losses) * p)))
        found = _scan_chunk(upper, lower, losses, delta)
        if found is not None:
            return found
        carry_u, carry_l, head = float(upper[-1]), float(lower[-1]), float(losses[-1]) - step
        start, size = end, 2 * size
    u, low = carry_u, carry_l
    if u <= low + delta:
        return 0.0
    return math.log((u - delta) / low)


def _scan_chunk(upper: npt.NDArray[np.float64], lower: npt.NDArray[np.float64],
                losses: npt.NDArray[np.float64], delta: float) -> float | None:
    """:func:`_scan` within one chunk (``upper``/``lower``: the sums before each of its
    points and after its last); None if the scan goes on past it."""
    before_u, before_l = upper[:-1], lower[:-1]
    ok = (before_u > delta) & (before_l > 0)
    # over: (U - δ)/L beyond ~1e308 (L subnormal) is inf, and so is its log: an ε beyond
    # ~709 nats reads as inf (conservative; a noise search tries such small noise on its
    # way, and each run printed numpy's "overflow encountered in divide")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(ok, np.log(np.where(ok, before_u - delta, 1.0)
                                    / np.where(ok, before_l, 1.0)), -np.inf)
    stop = np.flatnonzero(ok & (ratio >= losses))
    underflow = np.flatnonzero((upper[1:] >= delta) & (lower[1:] == 0))
    k_stop = int(stop[0]) if stop.size else len(losses)
    if underflow.size and int(underflow[0]) < k_stop:
        return max(0.0, float(losses[int(underflow[0])]))
    if not stop.size:
        return None
    u, low = float(upper[k_stop]), float(lower[k_stop])
    if u <= low + delta:
        return 0.0
    return math.log((u - delta) / low)
