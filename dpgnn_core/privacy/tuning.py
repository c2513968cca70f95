"""Private hyperparameter tuning: Papernot & Steinke (2022), "Hyperparameter Tuning with
Rényi Differential Privacy" (ICLR 2022).

The tuning mechanism :math:`A` draws a number of candidates :math:`K` at random (from a
:class:`TuningDistribution`, with a *secret* generator), runs :math:`K` candidates, each
with hyperparameters drawn at random from the search space, independently of the data,
and releases only the best one (its hyperparameters, model and score, ties broken by a
fixed rule). When :math:`K = 0` (Poisson only) it releases nothing. Each candidate, score
included, is the base mechanism :math:`Q`; this module turns :math:`Q`'s RDP curve into
:math:`A`'s (:func:`tuning_rdp`), and :math:`A`'s curve into (ε, δ) with the same
conversion as :class:`~dpgnn_core.privacy.accountants.RdpAccountant`
(:func:`tuning_epsilon`, :func:`calibrate_tuning_noise`). Derivations and the conservative
choices: docs/privacy.md, "Private hyperparameter tuning".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

from dpgnn_core.privacy import rdp as R
from dpgnn_core.privacy.accountants import (
    Accountant,
    RdpAccountant,
    check_delta,
    check_epsilon,
)
from dpgnn_core.privacy.calibrate import Calibration, calibrate_noise
from dpgnn_core.privacy.events import Ledger, PrivacyError

FloatArray = npt.NDArray[np.float64]

TuningKind = Literal["truncated_negative_binomial", "poisson"]

#: A base mechanism's RDP curve: a function of the order, or (orders, values).
RdpCurve = Callable[[float], float] | tuple[npt.ArrayLike, npt.ArrayLike]


@dataclass(frozen=True)
class TuningDistribution:
    """The distribution of the number of candidates :math:`K`.

    * ``truncated_negative_binomial`` :math:`\\mathcal{D}_{\\eta,\\gamma}` (η > -1,
      0 < γ < 1), on :math:`k \\ge 1`:

      .. math::
          \\Pr[K = k] = \\frac{(1-\\gamma)^k}{\\gamma^{-\\eta} - 1}
          \\prod_{\\ell=0}^{k-1} \\frac{\\ell + \\eta}{\\ell + 1}

      η = 1 is the geometric distribution :math:`\\gamma (1-\\gamma)^{k-1}`, η = 0 (as a
      limit) the logarithmic distribution :math:`(1-\\gamma)^k / (k \\log(1/\\gamma))`.
    * ``poisson`` (μ ≥ 1), on :math:`k \\ge 0`; :math:`K = 0` releases nothing. Below
      μ = 1 Theorem 6's bound turns negative as λ → 1, so it is refused.

    Use the constructors :meth:`geometric`, :meth:`logarithmic`,
    :meth:`truncated_negative_binomial` and :meth:`poisson`.

    Args:
        kind (str, optional): ``truncated_negative_binomial`` or ``poisson``.
            (default: :obj:`"truncated_negative_binomial"`)
        eta (float, optional): η, truncated negative binomial only. (default: :obj:`None`)
        gamma (float, optional): γ, truncated negative binomial only.
            (default: :obj:`None`)
        mu (float, optional): μ, Poisson only. (default: :obj:`None`)
    """

    kind: TuningKind = "truncated_negative_binomial"
    eta: float | None = None
    gamma: float | None = None
    mu: float | None = None

    def __post_init__(self) -> None:
        if self.kind == "truncated_negative_binomial":
            if self.mu is not None:
                raise PrivacyError("mu is a parameter of the Poisson distribution only")
            if self.eta is None or not (math.isfinite(self.eta) and self.eta > -1):
                raise PrivacyError(f"eta must be a finite number > -1, got {self.eta!r}")
            if self.gamma is None or not 0 < self.gamma < 1:
                raise PrivacyError(f"gamma must lie in (0, 1), got {self.gamma!r}")
        elif self.kind == "poisson":
            if self.eta is not None or self.gamma is not None:
                raise PrivacyError("eta and gamma are parameters of the truncated negative "
                                   "binomial only")
            if self.mu is None or not (math.isfinite(self.mu) and self.mu >= 1):
                # Theorem 6's log(μ)/(λ-1) is negative for μ < 1 and the bound goes
                # below 0 as λ → 1; an exact computation refutes it there (tests)
                raise PrivacyError(f"mu must be a finite number >= 1 (Theorem 6's bound "
                                   f"does not hold below 1), got {self.mu!r}")
        else:
            raise PrivacyError(f"unknown tuning distribution {self.kind!r}; choose "
                               "truncated_negative_binomial or poisson")

    @classmethod
    def truncated_negative_binomial(cls, eta: float, gamma: float) -> TuningDistribution:
        return cls("truncated_negative_binomial", eta=float(eta), gamma=float(gamma))

    @classmethod
    def geometric(cls, gamma: float) -> TuningDistribution:
        """η = 1: :math:`\\Pr[K = k] = \\gamma(1-\\gamma)^{k-1}`, mean 1/γ."""
        return cls.truncated_negative_binomial(1.0, gamma)

    @classmethod
    def logarithmic(cls, gamma: float) -> TuningDistribution:
        """η = 0: :math:`\\Pr[K = k] = (1-\\gamma)^k / (k \\log(1/\\gamma))`."""
        return cls.truncated_negative_binomial(0.0, gamma)

    @classmethod
    def poisson(cls, mu: float) -> TuningDistribution:
        return cls("poisson", mu=float(mu))

    # -- parameters, checked in __post_init__ -------------------------------------------
    @property
    def _eta(self) -> float:
        assert self.eta is not None
        return self.eta

    @property
    def _gamma(self) -> float:
        assert self.gamma is not None
        return self.gamma

    @property
    def _mu(self) -> float:
        assert self.mu is not None
        return self.mu

    def mean(self) -> float:
        """:math:`\\mathbb{E}[K]`.

        .. math::
            \\mathbb{E}[K] = \\frac{\\eta(1-\\gamma)}{\\gamma(1-\\gamma^\\eta)}
            \\;(\\eta \\ne 0), \\quad
            \\frac{1/\\gamma - 1}{\\log(1/\\gamma)} \\;(\\eta = 0), \\quad
            \\mu \\;(\\text{Poisson})
        """
        if self.kind == "poisson":
            return self._mu
        eta, gamma = self._eta, self._gamma
        if eta == 0:
            return (1.0 / gamma - 1.0) / math.log(1.0 / gamma)
        # 1 - γ^η = -expm1(η log γ), accurate for small |η|
        return eta * (1.0 - gamma) / (gamma * -math.expm1(eta * math.log(gamma)))

    def pmf(self, k: int) -> float:
        """:math:`\\Pr[K = k]`, in log space (the product is
        :math:`\\eta\\,\\Gamma(k+\\eta) / (\\Gamma(1+\\eta)\\,k!)`)."""
        if int(k) != k:
            raise PrivacyError(f"k must be an integer, got {k!r}")
        k = int(k)
        if self.kind == "poisson":
            mu = self._mu
            return 0.0 if k < 0 else math.exp(k * math.log(mu) - mu - math.lgamma(k + 1))
        if k < 1:
            return 0.0
        return math.exp(self._log_pmf_tnb(k))

    def _log_pmf_tnb(self, k: int) -> float:
        eta, gamma = self._eta, self._gamma
        log_l = math.log(1.0 / gamma)
        # η / (γ^{-η} - 1) with its η → 0 limit 1 / log(1/γ)
        log_norm = -math.log(log_l) if eta == 0 else math.log(eta / math.expm1(eta * log_l))
        return (k * math.log1p(-gamma) + float(gammaln(k + eta) - gammaln(1.0 + eta)
                                               - gammaln(k + 1.0)) + log_norm)

    def sample(self, rng: np.random.Generator) -> int:
        """One draw of :math:`K`.

        Args:
            rng (numpy.random.Generator): a *secret* generator (e.g. from
                ``Randomness.for_spec(spec).numpy_generator("tuning")``); never one seeded
                from a spec's seed: the bound assumes :math:`K` is not known to the
                adversary.
        """
        if not isinstance(rng, np.random.Generator):
            raise PrivacyError("sample needs a numpy Generator supplied by the caller")
        if self.kind == "poisson":
            return int(rng.poisson(self._mu))
        # inverse CDF, walking the pmf with its ratio (1-γ)(k+η)/(k+1)
        u = float(rng.random())
        eta, gamma = self._eta, self._gamma
        k, p = 1, math.exp(self._log_pmf_tnb(1))
        cdf = p
        while cdf < u:
            p *= (1.0 - gamma) * (k + eta) / (k + 1)
            k += 1
            if cdf + p == cdf:  # the remaining terms no longer move the cdf
                break
            cdf += p
        return k


def _curve(rdp: RdpCurve, orders: npt.ArrayLike | None) -> tuple[FloatArray, FloatArray]:
    if callable(rdp):
        o = R.DEFAULT_ORDERS if orders is None else np.asarray(orders, dtype=np.float64)
        values = np.array([float(rdp(float(a))) for a in o], dtype=np.float64)
    else:
        if orders is not None:
            raise PrivacyError("give orders either with the curve or as orders, not both")
        o = np.asarray(rdp[0], dtype=np.float64)
        values = np.asarray(rdp[1], dtype=np.float64)
    if o.ndim != 1 or o.shape != values.shape or o.size == 0:
        raise PrivacyError("an RDP curve needs one value per order")
    if (o <= 1).any() or np.isnan(o).any():
        raise PrivacyError("Rényi orders must be > 1")
    if np.isnan(values).any() or (values < 0).any():
        raise PrivacyError("RDP values must be >= 0 (inf for an unusable order)")
    return o, values


def tuning_rdp(rdp: RdpCurve, distribution: TuningDistribution,
               orders: npt.ArrayLike | None = None) -> tuple[FloatArray, FloatArray]:
    """RDP curve of the tuning mechanism, from its base mechanism's curve ε(λ).

    Truncated negative binomial (Papernot & Steinke, Thm. 2), λ̂ chosen per call from the
    same orders (any λ̂ gives a valid bound, so the smallest over the grid is one):

    .. math::
        \\varepsilon'(\\lambda) = \\varepsilon(\\lambda) + \\min_{\\hat\\lambda} \\left[
        (1+\\eta)\\left(1 - \\frac{1}{\\hat\\lambda}\\right)\\varepsilon(\\hat\\lambda)
        + \\frac{(1+\\eta)\\log(1/\\gamma)}{\\hat\\lambda}\\right]
        + \\frac{\\log \\mathbb{E}[K]}{\\lambda - 1}

    Poisson (Thm. 6), with :math:`\\hat\\delta(\\lambda)` the δ at which the base mechanism
    is :math:`(\\hat\\varepsilon, \\hat\\delta)`-DP for
    :math:`e^{\\hat\\varepsilon} = 1 + 1/(\\lambda - 1)`, from its RDP curve:

    .. math::
        \\varepsilon'(\\lambda) = \\varepsilon(\\lambda) + \\mu\\,\\hat\\delta(\\lambda)
        + \\frac{\\log \\mu}{\\lambda - 1}

    Args:
        rdp (callable or (orders, values)): the base mechanism's RDP: λ ↦ ε(λ), or two
            arrays; ``inf`` marks an order that cannot be used.
        distribution (TuningDistribution): the distribution of K.
        orders (sequence of float, optional): where a callable is evaluated.
            (default: :data:`~dpgnn_core.privacy.rdp.DEFAULT_ORDERS`)

    Returns:
        (orders, ε'(orders)).
    """
    o, eps = _curve(rdp, orders)
    if distribution.kind == "poisson":
        mu = distribution.mean()
        out = np.empty_like(eps)
        eps_hats = np.array([math.log1p(1.0 / (lam - 1.0)) for lam in o.tolist()])
        delta_hats = R.deltas_from_rdp(o, eps, eps_hats).tolist()
        for i, lam in enumerate(o.tolist()):
            out[i] = eps[i] + mu * delta_hats[i] + math.log(mu) / (lam - 1.0)
        return o, out
    eta, gamma = distribution._eta, distribution._gamma
    hat = (1.0 + eta) * ((1.0 - 1.0 / o) * eps + math.log(1.0 / gamma) / o)
    best_hat = float(np.min(hat))  # inf when every order is unusable
    return o, eps + best_hat + math.log(distribution.mean()) / (o - 1.0)


class TuningRdpAccountant(Accountant):
    """The RDP accountant of a tuning run: a ledger is *one candidate's* (training and the
    release of its score); ε and δ are the tuning mechanism's.

    Args:
        distribution (TuningDistribution): the distribution of the number of candidates.
        orders (sequence of float, optional): Rényi orders > 1.
            (default: :data:`~dpgnn_core.privacy.rdp.DEFAULT_ORDERS`)
    """

    name = "rdp_tuning"

    def __init__(self, distribution: TuningDistribution,
                 orders: npt.ArrayLike | None = None) -> None:
        if not isinstance(distribution, TuningDistribution):
            raise PrivacyError("distribution must be a TuningDistribution")
        self.distribution = distribution
        self.base = RdpAccountant(None if orders is None else np.asarray(orders, dtype=float))

    @property
    def orders(self) -> FloatArray:
        return np.asarray(self.base.orders, dtype=np.float64)

    def candidate_rdp(self, candidates: Ledger | Sequence[Ledger]) -> FloatArray:
        """The base mechanism's curve: the pointwise maximum over ``candidates``' curves
        (the configurations the search space may draw)."""
        ledgers = [candidates] if isinstance(candidates, Ledger) else list(candidates)
        if not ledgers:
            raise PrivacyError("no candidate ledger given")
        curves = [np.asarray(self.base.rdp(ledger), dtype=np.float64) for ledger in ledgers]
        return np.asarray(np.max(np.stack(curves), axis=0), dtype=np.float64)

    def rdp(self, candidates: Ledger | Sequence[Ledger]) -> FloatArray:
        """The tuning mechanism's RDP curve at :attr:`orders`."""
        return tuning_rdp((self.orders, self.candidate_rdp(candidates)),
                          self.distribution)[1]

    @staticmethod
    def _empty(candidates: Ledger | Sequence[Ledger]) -> bool:
        ledgers = [candidates] if isinstance(candidates, Ledger) else list(candidates)
        return bool(ledgers) and all(not ledger.entries for ledger in ledgers)

    def epsilon(self, ledger: Ledger | Sequence[Ledger], delta: float) -> float:
        check_delta(delta)
        if self._empty(ledger):  # a data-independent candidate: so is the best of K
            return 0.0
        return R.epsilon_from_rdp(self.orders, self.rdp(ledger), delta)[0]

    def delta(self, ledger: Ledger | Sequence[Ledger], epsilon: float) -> float:
        check_epsilon(epsilon)
        if self._empty(ledger):
            return 0.0
        return R.delta_from_rdp(self.orders, self.rdp(ledger), epsilon)[0]


def tuning_epsilon(candidate_ledger: Ledger | Sequence[Ledger],
                   distribution: TuningDistribution, delta: float,
                   orders: npt.ArrayLike | None = None) -> float:
    """ε at ``delta`` of releasing the best of K candidates, K ~ ``distribution``.

    Args:
        candidate_ledger (Ledger or sequence of Ledger): one candidate's ledger: its
            training *and* the release of the score the selection compares. With several
            (configurations of different cost), the pointwise maximum of their RDP curves
            is used.
        distribution (TuningDistribution): the distribution of K.
        delta (float): δ.
        orders (sequence of float, optional): Rényi orders.
            (default: :data:`~dpgnn_core.privacy.rdp.DEFAULT_ORDERS`)
    """
    return TuningRdpAccountant(distribution, orders).epsilon(candidate_ledger, delta)


def calibrate_tuning_noise(make_ledger: Callable[[float], Ledger],
                           distribution: TuningDistribution, target_epsilon: float,
                           delta: float, *, orders: npt.ArrayLike | None = None,
                           rtol: float = 1e-4, max_noise: float = 1e6) -> Calibration:
    """Smallest noise multiplier z (to relative tolerance ``rtol``) whose tuning ε is at
    most ``target_epsilon``: :func:`~dpgnn_core.privacy.calibrate.calibrate_noise` with
    :class:`TuningRdpAccountant`, so the result keeps the feasible side (its ε, reported
    in the :class:`~dpgnn_core.privacy.calibrate.Calibration`, is ≤ the target).

    Args:
        make_ledger (callable): z ↦ one candidate's ledger at noise z.
        distribution (TuningDistribution): the distribution of K.
        target_epsilon (float): target ε of the whole tuning run.
        delta (float): δ.
        orders (sequence of float, optional): Rényi orders.
            (default: :data:`~dpgnn_core.privacy.rdp.DEFAULT_ORDERS`)
        rtol (float, optional): relative width of the final bracket. (default: :obj:`1e-4`)
        max_noise (float, optional): give up above this noise. (default: :obj:`1e6`)
    """
    return calibrate_noise(make_ledger, target_epsilon, delta,
                           TuningRdpAccountant(distribution, orders), rtol=rtol,
                           max_noise=max_noise)
