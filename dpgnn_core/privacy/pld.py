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

import numpy as np
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import ndtr

from dpgnn_core.privacy.events import (
    DpgnnEvent,
    GaussianEvent,
    PoissonGaussianEvent,
    PrivacyError,
    PrivacyEvent,
)
from dpgnn_core.privacy.rdp import hypergeometric_log_pmf

PLD = pld_lib.PrivacyLossDistribution
_TAIL_SD = 12.0  # mass beyond 12 standard deviations (< 1e-32) goes to +inf (pessimistic)


def pld_dpgnn_step(noise_multiplier: float, num_train: int, batch_size: int, occurrences: int,
                   value_discretization_interval: float = 1e-3) -> PLD:
    """PLD of one DP-GNN step for the revealed-ρ dominating pair (module docstring).

    Each loss value is rounded *up* to the grid (pessimistic); loss mass below the grid's
    lowest point is moved up to it, mass above the highest point is put at +infinity.
    """
    k, logp = hypergeometric_log_pmf(num_train, occurrences, batch_size)
    p = np.exp(logp)
    mu = (k.astype(np.float64) / (noise_multiplier * occurrences)) ** 2 / 2.0
    sd = np.sqrt(2.0 * mu)
    d = value_discretization_interval
    lo = np.floor(np.min(mu - _TAIL_SD * sd) / d)
    hi = np.ceil(np.max(mu + _TAIL_SD * sd) / d)
    n_points = int(hi - lo) + 1
    if n_points > 5_000_000:
        raise PrivacyError(f"PLD grid of {n_points} points: raise value_discretization_interval"
                           " or use the RDP accountant")
    grid = (lo + np.arange(n_points)) * d  # the value each bucket's mass is rounded up to
    pmf = np.zeros(n_points)
    infinity = 0.0
    for pk, mk, sk in zip(p, mu, sd, strict=True):
        if pk == 0.0:
            continue
        if sk == 0.0:  # rho = 0: zero loss, exactly on the grid
            pmf[int(round(-lo))] += pk
            continue
        cdf = ndtr((grid - mk) / sk)  # P(L <= grid_i)
        mass = np.diff(cdf, prepend=0.0)  # bucket i holds L in (grid_{i-1}, grid_i]
        pmf += pk * mass
        infinity += pk * (1.0 - cdf[-1])
    nz = np.flatnonzero(pmf > 0)
    rounded = {int(lo) + int(i): float(pmf[i]) for i in nz}
    return PLD.create_from_rounded_probability(rounded, infinity, d, pessimistic_estimate=True)


def pld_for_event(event: PrivacyEvent, value_discretization_interval: float = 1e-3) -> PLD:
    """The composed PLD of one event."""
    d = value_discretization_interval
    if isinstance(event, GaussianEvent):
        base = pld_lib.from_gaussian_mechanism(event.noise_multiplier,
                                               value_discretization_interval=d)
        return base.self_compose(event.count) if event.count > 1 else base
    if isinstance(event, PoissonGaussianEvent):
        base = pld_lib.from_gaussian_mechanism(event.noise_multiplier,
                                               sampling_prob=event.sampling_rate,
                                               value_discretization_interval=d)
        return base.self_compose(event.steps) if event.steps > 1 else base
    if isinstance(event, DpgnnEvent):
        base = pld_dpgnn_step(event.noise_multiplier, event.num_train, event.batch_size,
                              event.occurrences, d)
        return base.self_compose(event.steps) if event.steps > 1 else base
    raise PrivacyError(f"the PLD accountant does not analyse {event.kind} events "
                       "(dp-accounting has no PLD for sampling without replacement); "
                       "use the RDP accountant")
