"""Private selection in sweeps (``selection = "private"``): Papernot & Steinke's tuning
mechanism (:mod:`dpgnn_core.privacy.tuning`) over one method's search at one target ε.

For each private method search and each target ε of a sweep:

1. **Plan** (:func:`plan_selection`, before anything trains; data-independent: only the
   configurations, the public N_train, δ, the target and the distribution of K enter).
   Each configuration c gets its own noise multiplier z_c = u · r_c: r_c makes c alone
   spend the target at δ (RDP), and the common factor u is the smallest (to ``rtol``,
   feasible side) whose tuning ε, over the *pointwise maximum* of every configuration's
   RDP curve at its z_c, is at most the target. The tuning ε is then recomputed from
   exactly those ledgers (:attr:`TuningPlan.epsilon`) and checked against the target.
2. **Draw** (:func:`draw`, with :func:`secret_generator`: numpy seeded from
   ``secrets.randbits(128)``, never from a spec seed, never stored): K from the
   distribution, then K configurations uniformly with replacement and K initialisation
   seeds uniformly from [0, 2^31), all independent: K i.i.d. draws of Q, as the theorem
   requires. Two candidates may coincide in configuration *and* seed; they are still two
   independent trainings (the noise and batches are secret and fresh, never from the seed)
   and are kept apart by their index in the draw (their artifacts, cache keys and
   checkpoints carry it: :func:`tasks.train.train`'s ``candidate``), so nothing is redrawn
   and no total-variation term enters the charge.
3. **Train** each candidate for its configured steps with ``epsilon`` = c's own RDP ε at
   z_c (:func:`candidate_spec`): the method's calibration (RDP, feasible side) gives
   z'_c >= z_c, computed in the plan the same way; the tuning ε is that of the z'_c
   ledgers, exactly what trains, and each candidate's report and ledger are checked
   against it after training (:func:`verify_candidate`).
4. **Score and release.** Where the method bounds the sensitivity Δ of its count of
   correct validation predictions (:attr:`~dpgnn_core.methods.registry.Method.score_sensitivity`),
   every candidate releases that count plus Gaussian noise (:func:`noisy_count`; the
   event is in every planned ledger, so the tuning ε covers it: :class:`ScorePlan`);
   otherwise the score is the noise-free validation accuracy, flagged (:data:`SCORE_NOTE`).
   Only the best candidate on its score is released (ties: the earliest draw, a
   uniformly random order). Its ε is :attr:`TuningPlan.epsilon`, fixed before the draw, so
   the reported number reveals nothing about K or the draws.

Derivations and what the tuning ε covers: docs/privacy.md, "Private selection in sweeps".
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from dpgnn_core.privacy.accountants import RdpAccountant
from dpgnn_core.privacy.calibrate import calibrate_noise
from dpgnn_core.privacy.events import Ledger, PrivacyError
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.privacy.selection_score import (  # re-exported: the selection's score
    SCORE_EVENT,
    SCORE_NOTE,
    ScorePlan,
    correct_count,
    noisy_count,
    score_plan,
)
from dpgnn_core.privacy.tuning import TuningDistribution, TuningRdpAccountant

#: Candidates' initialisation seeds are uniform on [0, 2^SEED_BITS): a spec's seed must be
#: below 2^32 (``specs.base.Seed``: numpy's legacy seeding), and GAP and ProGAP add small
#: offsets to it, so 31 bits leave room for those.
SEED_BITS = 31

#: What the tuning bound assumes of every candidate, selected or not.
CANDIDATES_NOTE = ("the tuning bound covers what the candidates' ledgers cover: an "
                   "unaccounted use of data by any candidate (as listed above for the "
                   "selected one) is outside it")


@dataclass(frozen=True)
class CandidatePlan:
    """One configuration of the search, as every candidate drawn from it trains.

    Attributes:
        config (dict): its options (as in the sweep).
        config_id (str): its name in the results.
        spec (Any): its validated spec at the target ε (the sweep's point; steps T).
        steps (int): T.
        noise_multiplier (float): the noise it trains with (z'_c >= z_c).
        own_epsilon (float): ε of this configuration's training alone at z_c (RDP, at the
            candidate δ): the ``epsilon`` a candidate's spec carries so that its steps
            resolve to T.
        ledger (Ledger): the planned ledger of one candidate: T steps at z'_c, then the
            score's event when the score is private (:class:`ScorePlan`).
    """

    config: dict[str, Any]
    config_id: str
    spec: Any
    steps: int
    noise_multiplier: float
    own_epsilon: float
    ledger: Ledger


@dataclass(frozen=True)
class TuningPlan:
    """The private selection of one method at one target ε.

    Attributes:
        method (str): the method.
        target_epsilon (float): the sweep's ε.
        delta (float): δ of the release (the candidates' δ; 1/(10 N_train) by default).
        distribution (TuningDistribution): the distribution of K.
        candidates (tuple of CandidatePlan): the search space, in the sweep's order (a
            configuration listed twice is drawn twice as often).
        epsilon (float): the tuning ε at ``delta``: what the released candidate reports;
            ≤ the target.
        n_train (int): N_train used for the plan.
        noise_factor (float): u.
        score (ScorePlan, optional): the noisy score every candidate releases; None when
            the method's score sensitivity is not bounded (the score is then flagged,
            :data:`SCORE_NOTE`).
    """

    method: str
    target_epsilon: float
    delta: float
    distribution: TuningDistribution
    candidates: tuple[CandidatePlan, ...]
    epsilon: float
    n_train: int
    noise_factor: float = field(default=math.nan)
    score: ScorePlan | None = None

    def ledgers(self) -> list[Ledger]:
        """Every configuration's planned ledger (the curves whose maximum is Q's)."""
        return [c.ledger for c in self.candidates]

    def describe(self) -> dict[str, Any]:
        """The plan as JSON: everything in it is data-independent (public)."""
        d = self.distribution
        return {"mechanism": "Papernot & Steinke 2022, best of K candidates",
                "distribution": {"kind": d.kind, "eta": d.eta, "gamma": d.gamma, "mu": d.mu,
                                 "expected_candidates": d.mean()},
                "target_epsilon": self.target_epsilon, "epsilon": self.epsilon,
                "delta": self.delta, "accountant": "rdp",
                "configurations": len(self.candidates), "n_train": self.n_train,
                "noise_multipliers": {c.config_id: c.noise_multiplier
                                      for c in self.candidates},
                "steps": {c.config_id: c.steps for c in self.candidates},
                "score": (None if self.score is None else {
                    "released": "count of correct validation predictions + Gaussian noise",
                    "sensitivity": self.score.sensitivity,
                    "noise_multiplier": self.score.noise_multiplier,
                    "noise_std": self.score.noise_std, "share": self.score.share,
                    "level": self.score.level, "relation": self.score.relation})}

    def report_line(self) -> str:
        d = self.distribution
        dist = (f"Poisson(mu={d.mean():.4g})" if d.kind == "poisson" else
                f"truncated negative binomial(eta={d.eta:g}, gamma={d.gamma:.4g})")
        return (f"selected by private hyperparameter tuning (Papernot & Steinke 2022), "
                f"tuning epsilon = {self.epsilon:.4g} at delta = {self.delta:.3g}, "
                f"K ~ {dist} (E[K] = {d.mean():.4g}) over {len(self.candidates)} "
                "configurations, " + (
                    "on a noise-free validation score (unaccounted)" if self.score is None
                    else f"on a noisy validation count (noise std {self.score.noise_std:.3g}"
                         ", in the tuning epsilon)"))


def _rdp_ledger(method: Any, spec: Any, n_train: int) -> Any:
    """The method's plan z -> ledger, refused unless RDP analyses it."""
    make = method.ledger_for(spec, n_train)
    try:
        RdpAccountant().rdp(make(1.0))
    except PrivacyError as e:
        raise PrivacyError(f"{method.name}: private selection needs a ledger the RDP "
                           f"accountant analyses (the tuning theorem is an RDP bound): {e}"
                           ) from e
    return make


def check_candidate_options(method: str, config: Mapping[str, Any]) -> None:
    """Refuse what private selection cannot train at a calibrated noise.

    Raises:
        PrivacyError: a method whose catalogue entry says private selection does not
            apply (GAP and ProGAP calibrate their own noise scale and take no
            ``noise_multiplier``), a configured ``noise_multiplier``, a PLD ``accountant``,
            ``insecure_reproducible_noise`` or ``log_raw_loss``.
    """
    from dpgnn_core.methods.catalog import entry

    if not entry(method).private_selection:
        raise PrivacyError(f"{method}: private selection trains each candidate at a "
                           "calibrated noise multiplier, which this method does not take (GAP "
                           "and ProGAP calibrate their own composition); use selection = "
                           "\"flagged\" for it")
    if config.get("noise_multiplier") is not None:
        raise PrivacyError(f"{method}: private selection calibrates the noise; give steps, "
                           "not noise_multiplier")
    if config.get("accountant", "rdp") != "rdp":
        raise PrivacyError(f"{method}: private selection accounts with RDP (the tuning "
                           "theorem is an RDP bound); drop accountant or set it to rdp")
    if config.get("insecure_reproducible_noise"):
        raise PrivacyError(f"{method}: insecure_reproducible_noise is not private")
    if config.get("log_raw_loss"):
        raise PrivacyError(f"{method}: log_raw_loss records every candidate's raw training "
                           "loss, outside the tuning bound (it would show the withheld "
                           "candidates and their number); drop it")


def plan_selection(method_name: str, target_epsilon: float,
                   configurations: Sequence[tuple[dict[str, Any], str, Any]], n_train: int,
                   distribution: TuningDistribution, *, rtol: float = 1e-4,
                   score_share: float = 0.2) -> TuningPlan:
    """Calibrate every configuration's noise so that the tuning ε over the pointwise
    maximum of their RDP curves is at most ``target_epsilon``.

    When the method bounds its score's sensitivity Δ
    (:attr:`~dpgnn_core.methods.registry.Method.score_sensitivity`), every candidate's
    ledger is its training plus the noisy score (:class:`ScorePlan`): the score's noise
    z_s is fixed first, so that the score alone spends ``score_share`` · target (RDP, at
    δ), and the training noise is then calibrated with the score in every curve.

    Args:
        method_name (str): a registered private method.
        target_epsilon (float): the target ε of the whole selection.
        configurations (sequence of (config, config_id, spec)): the search space; ``spec``
            the validated spec of the configuration at the target (it fixes the steps).
        n_train (int): N_train (public).
        distribution (TuningDistribution): the distribution of K.
        rtol (float, optional): relative width of the common factor's final bracket.
        score_share (float, optional): the score's share of the target (above).
            (default: :obj:`0.2`)

    Raises:
        PrivacyError: δ differs between configurations, a ledger RDP cannot analyse, an
            option private selection refuses, or an unreachable target.
    """
    from dpgnn_core.methods.registry import get

    if not configurations:
        raise PrivacyError(f"{method_name}: no configuration to select from")
    method = get(method_name)
    if not method.private:
        raise PrivacyError(f"{method_name} is not a private method")
    delta = selection_delta(method_name, configurations, n_train)
    check_distribution(method_name, distribution)
    rdp = RdpAccountant()
    makes = []
    for config, _cid, spec in configurations:
        check_candidate_options(method_name, config)
        makes.append(_rdp_ledger(method, spec, n_train))
    score = score_plan(method, makes[0](1.0), target_epsilon, delta, score_share)
    floor = check_reachable(method_name, target_epsilon, delta, distribution, score)
    # r_c: configuration c alone spends the target (balances configurations of different
    # cost); one calibration per distinct configuration.
    ratios: dict[str, float] = {}
    for (_c, cid, _s), make in zip(configurations, makes, strict=True):
        if cid not in ratios:
            ratios[cid] = calibrate_noise(make, target_epsilon, delta, rdp,
                                          rtol=1e-2).noise_multiplier  # a balance only
    r = [ratios[cid] for _c, cid, _s in configurations]
    extra = score.ledger() if score is not None else Ledger()

    def bundle(u: float) -> list[Ledger]:
        return [make(u * rc) + extra for make, rc in zip(makes, r, strict=True)]

    tuning = TuningRdpAccountant(distribution)
    # TuningRdpAccountant takes a sequence of candidate ledgers (their pointwise maximum)
    try:
        u = calibrate_noise(cast(Any, bundle), target_epsilon, delta, tuning,
                            rtol=rtol).noise_multiplier
    except PrivacyError as e:  # near the floor: name the cause
        raise PrivacyError(f"{method_name}: {e}; with {_k_words(distribution)} the tuning "
                           f"epsilon is at least {floor:.4g} at any noise") from e
    # The noise each candidate will train with: its spec carries epsilon = its own RDP ε
    # at z_c = u r_c, and the method calibrates to it exactly as here (PrivateRun.calibrate:
    # calibrate_noise, RDP, default tolerance), giving z'_c >= z_c (the feasible side).
    trained: dict[str, tuple[float, float]] = {}
    for (_c, cid, _s), make, rc in zip(configurations, makes, r, strict=True):
        if cid in trained:
            continue
        own = rdp.epsilon(make(u * rc), delta)
        z = calibrate_noise(make, own, delta, rdp).noise_multiplier
        if not z >= u * rc:
            raise PrivacyError(f"{cid}: calibrating to its own epsilon {own} gives noise "
                               f"{z} below the planned {u * rc}")
        trained[cid] = (own, z)
    ledgers = [make(trained[cid][1]) + extra
               for (_c, cid, _s), make in zip(configurations, makes, strict=True)]
    # The final check: exactly the ledgers (noise, steps) the candidates will train with.
    eps = tuning.epsilon(ledgers, delta)
    if not eps <= target_epsilon:
        raise PrivacyError(f"{method_name}: calibrated tuning epsilon {eps} exceeds the "
                           f"target {target_epsilon}")
    cands = tuple(
        CandidatePlan(config=dict(config), config_id=cid, spec=spec, steps=int(spec.steps),
                      noise_multiplier=trained[cid][1], own_epsilon=trained[cid][0],
                      ledger=ledger)
        for (config, cid, spec), ledger in zip(configurations, ledgers, strict=True))
    return TuningPlan(method=method_name, target_epsilon=float(target_epsilon), delta=delta,
                      distribution=distribution,
                      candidates=cands, epsilon=eps, n_train=int(n_train), noise_factor=u,
                      score=score)


def selection_delta(method_name: str,
                    configurations: Sequence[tuple[dict[str, Any], str, Any]],
                    n_train: int) -> float:
    """δ of a selection: the configurations' one δ, or 1/(10 N_train) when none is given.

    Raises:
        PrivacyError: the configurations give different δ.
    """
    deltas = {c[2].delta for c in configurations}
    if len(deltas) > 1:
        raise PrivacyError(f"{method_name}: private selection needs one delta for every "
                           f"configuration, got {sorted(map(str, deltas))}")
    given = deltas.pop()
    return float(given) if given is not None else 1.0 / (10.0 * n_train)


#: The largest E[K] a private selection accepts: it trains about that many candidates (one
#: training task each); above it a spec is almost surely mistyped, and is refused before
#: anything starts rather than submitting millions of tasks.
MAX_EXPECTED_CANDIDATES = 10_000


def _k_words(distribution: TuningDistribution) -> str:
    d = distribution
    what = (f"Poisson(mu={d.mean():.4g})" if d.kind == "poisson" else
            f"truncated negative binomial(eta={d.eta:g}, gamma={d.gamma:.4g})")
    return f"K ~ {what}, E[K] = {d.mean():.4g} (the sweep's tuning)"


def check_distribution(method_name: str, distribution: TuningDistribution) -> None:
    """Refuse an expected number of candidates above :data:`MAX_EXPECTED_CANDIDATES`.

    Raises:
        PrivacyError: naming E[K] and the spec's fields that set it.
    """
    mean = distribution.mean()
    if not mean <= MAX_EXPECTED_CANDIDATES:
        raise PrivacyError(
            f"{method_name}: {_k_words(distribution)}: private selection trains K "
            f"candidates, about {mean:.3g} trainings, and accepts E[K] <= "
            f"{MAX_EXPECTED_CANDIDATES}; lower tuning.expected_candidates (or raise gamma, "
            "lower mu)")


def tuning_floor(distribution: TuningDistribution, delta: float,
                 score: ScorePlan | None = None) -> float:
    """The smallest tuning ε at ``delta`` that any training noise reaches: Q's curve with
    its training part at 0 (infinite noise), that is the score's alone (0 without one).
    Theorem 2's (1+η) log(1/γ)/λ̂ and log(E[K])/(λ-1) terms (Theorem 6's log(μ)/(λ-1))
    stay: they grow with E[K]."""
    from dpgnn_core.privacy import rdp as R
    from dpgnn_core.privacy.tuning import tuning_rdp

    acc = RdpAccountant()
    orders = np.asarray(acc.orders, dtype=np.float64)
    curve = (np.asarray(acc.rdp(score.ledger()), dtype=np.float64) if score is not None
             else np.zeros_like(orders))
    return float(R.epsilon_from_rdp(*tuning_rdp((orders, curve), distribution), delta)[0])


def check_reachable(method_name: str, target_epsilon: float, delta: float,
                    distribution: TuningDistribution, score: ScorePlan | None) -> float:
    """Refuse a target below :func:`tuning_floor` (no noise reaches it: the number of
    candidates alone costs more); returns the floor.

    Raises:
        PrivacyError: naming E[K], the floor and the target.
    """
    floor = tuning_floor(distribution, delta, score)
    if not floor < target_epsilon:
        what, fix = (("the number of candidates alone costs", "") if score is None else
                     (f"the number of candidates with the noisy score (tuning.score_share = "
                      f"{score.share:g}) costs", ", lower tuning.score_share"))
        raise PrivacyError(
            f"{method_name}: {_k_words(distribution)}: {what} a tuning epsilon of at least "
            f"{floor:.4g} at delta = {delta:.3g} even with infinite training noise, above "
            f"the target epsilon {target_epsilon:g}; lower tuning.expected_candidates (or "
            f"raise gamma, lower mu){fix} or raise the target")
    return floor


def plan_private_selection(sweep: Any, pts: Sequence[Any], n_train: int
                           ) -> list[TuningPlan]:
    """One :class:`TuningPlan` per (private method search, target ε) of ``sweep``, from its
    points (the first seed's point of each configuration: the seed is replaced by a secret
    one per candidate)."""
    tuning = _tuning(sweep)
    return [plan_selection(m, eps, confs, n_train, tuning.distribution(len(confs)),
                           score_share=tuning.score_share)
            for (m, eps), confs in _groups(sweep, pts).items()]


def _tuning(sweep: Any) -> Any:
    from dpgnn_core.sweeps import TuningSpec

    return sweep.tuning or TuningSpec()


def _groups(sweep: Any, pts: Sequence[Any]
            ) -> dict[tuple[str, float], list[tuple[dict[str, Any], str, Any]]]:
    """The configurations of each (private method, target ε): the first seed's points."""
    first = sweep.seeds[0]
    groups: dict[tuple[str, float], list[tuple[dict[str, Any], str, Any]]] = {}
    for p in pts:
        if p.epsilon is None or p.seed != first:
            continue
        groups.setdefault((p.method, float(p.epsilon)), []).append(
            (dict(p.config), p.config_id, p.spec))
    return groups


def preflight_private_selection(sweep: Any, pts: Sequence[Any], n_train: int) -> None:
    """What :func:`plan_private_selection` refuses without calibrating the training noise
    (seconds, before Prefect and Dask start): the options, δ, E[K] above
    :data:`MAX_EXPECTED_CANDIDATES` and a target below :func:`tuning_floor` (the number of
    candidates alone costs more), each naming its cause. Nothing to check unless
    ``sweep.selection`` is ``"private"``.

    Raises:
        PrivacyError: the first refusal.
    """
    from dpgnn_core.methods.registry import get

    if sweep.selection != "private":
        return
    if n_train < 1:
        raise PrivacyError(f"private selection needs training records (split_counts.train "
                           f"= {n_train})")
    tuning = _tuning(sweep)
    for (name, eps), confs in _groups(sweep, pts).items():
        method = get(name)
        for config, _cid, _spec in confs:
            check_candidate_options(name, config)
        delta = selection_delta(name, confs, n_train)
        distribution = tuning.distribution(len(confs))
        check_distribution(name, distribution)
        training = _rdp_ledger(method, confs[0][2], n_train)(1.0)
        score = score_plan(method, training, eps, delta, tuning.score_share)
        check_reachable(name, eps, delta, distribution, score)


# --- the secret draw -----------------------------------------------------------------------


def secret_generator() -> np.random.Generator:
    """A numpy generator seeded from the operating system's CSPRNG (``secrets``): never a
    spec seed, never stored."""
    return np.random.default_rng(secrets.randbits(128))


@dataclass(frozen=True)
class Draw:
    """One candidate: which configuration (index into the plan) and its seed."""

    index: int
    seed: int


def draw(plan: TuningPlan, rng: np.random.Generator) -> list[Draw]:
    """K ~ the plan's distribution, then K (configuration, seed) pairs, independently and
    uniformly: K i.i.d. draws, never redrawn. Two draws may coincide; the candidates stay
    distinct by their position in the returned list (their index), which their training
    tasks carry (:func:`tasks.train.train`'s ``candidate``). Poisson may give K = 0
    (nothing is released)."""
    m = len(plan.candidates)
    k = plan.distribution.sample(rng)
    idx = rng.integers(0, m, size=k)
    seeds = rng.integers(0, 2**SEED_BITS, size=k, dtype=np.int64)
    return [Draw(int(i), int(s)) for i, s in zip(idx, seeds, strict=True)]


def candidate_spec(plan: TuningPlan, d: Draw) -> Any:
    """The spec a candidate trains: its configuration (its steps T) with ``epsilon`` = the
    configuration's own RDP ε at z_c, ``accountant = rdp`` and the candidate's secret
    ``seed``. The method's calibration then trains at exactly
    :attr:`CandidatePlan.noise_multiplier` (computed the same way in
    :func:`plan_selection`; checked after training by :func:`verify_candidate`).

    (Fixing ``noise_multiplier`` instead would make the method train until the budget is
    spent; such a model's saved spec, with its resolved steps, does not load again.)
    """
    from dpgnn_core.specs import parse_spec

    c = plan.candidates[d.index]
    return parse_spec({**c.config, "method": plan.method, "seed": d.seed,
                       "epsilon": c.own_epsilon, "accountant": "rdp"})


def verify_candidate(plan: TuningPlan, d: Draw, report: PrivacyReport,
                     ledger: Ledger) -> None:
    """Check that a trained candidate is the planned one: its noise multiplier is z_c, its
    steps T, and its ledger's RDP curve (with the score's event, when the score is private)
    is nowhere above the planned one (so the plan's tuning ε covers it).

    Raises:
        PrivacyError: any difference (nothing of the selection may then be released).
    """
    c = plan.candidates[d.index]
    z = float(report.noise_multiplier or 0.0)
    if not (report.private and z >= c.noise_multiplier
            and int(report.steps or -1) == c.steps):
        raise PrivacyError(f"{c.config_id}: the candidate trained with noise {z} for "
                           f"{report.steps} steps, not the planned "
                           f"{c.noise_multiplier} for {c.steps}; nothing is released")
    rdp = RdpAccountant()
    if plan.score is not None:
        ledger = ledger + plan.score.ledger()
    got, planned = rdp.rdp(ledger), rdp.rdp(c.ledger)
    if not bool(np.all(got <= planned * (1.0 + 1e-12) + 1e-15)):
        raise PrivacyError(f"{c.config_id}: the candidate's ledger exceeds the planned one; "
                           "nothing is released")


def select(scores: Sequence[float]) -> int:
    """The index of the best score (the earliest on ties: the draw order is uniformly
    random, so this is a random tie-break independent of the data).

    Raises:
        PrivacyError: a score is not a number (no validation nodes).
    """
    if any(not math.isfinite(s) for s in scores):
        raise PrivacyError("private selection needs a validation score for every "
                           "candidate (the dataset has validation records)")
    best = 0
    for i, s in enumerate(scores):
        if s > scores[best]:
            best = i
    return best


__all__ = ["CANDIDATES_NOTE", "MAX_EXPECTED_CANDIDATES", "SCORE_EVENT", "SCORE_NOTE",
           "SEED_BITS", "CandidatePlan", "Draw", "ScorePlan", "TuningPlan", "candidate_spec",
           "check_candidate_options", "check_distribution", "check_reachable",
           "correct_count", "draw", "noisy_count", "plan_private_selection",
           "plan_selection", "preflight_private_selection", "score_plan", "secret_generator",
           "select", "selection_delta", "tuning_floor", "verify_candidate"]
