"""The odometer's composition math across runs (pure: no SQLite, no Prefect).

What :class:`dpgnn_core.budget.BudgetStore` records is a sequence of *charges* (a run's
ledger, a private selection's RDP curve, or a fixed (ε, δ)); this module turns them into

* **one guarantee per protected unit** (:data:`UNITS`), counting every charge that bears
  on that unit through the conversions of :data:`IMPLIES` (group privacy; a charge that
  implies nothing about a unit costs ∞ there), and
* **the admission rule** of a budget: a privacy *filter* (:class:`Filter`) fixed when the
  budget is set, valid under fully adaptive composition (each run chosen after seeing the
  earlier ones), and, separately and labelled as such, the tightest *post hoc* figure for
  the fixed sequence recorded so far (:func:`compose`), which is what ``budget show``
  reports as spent but never what admits a run.

The units and their conversions are tables of their own (:mod:`.units`, re-exported here).

Derivations: docs/privacy.md, "Privacy budget across runs (the odometer)".
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import log_ndtr, ndtr

from dpgnn_core.errors import PrivacyError
from dpgnn_core.privacy.events import GaussianEvent, Ledger, LedgerEntry, PrivacyEvent
from dpgnn_core.privacy.rdp import DEFAULT_ORDERS, epsilon_from_rdp
from dpgnn_core.privacy.units import (
    CANONICAL,
    FAMILIES,
    IMPLIES,
    UNIT_WORDS,
    UNITS,
    family_of,
    group_size,
    protected_units,
    shown_units,
    source_unit,
)

FloatArray = npt.NDArray[np.float64]

# --- units and the conversions between them: dpgnn_core.privacy.units ---------------------

# --- RDP curves and their group-privacy conversion ---------------------------------------

ORDERS: FloatArray = DEFAULT_ORDERS


def _at_least(curve: FloatArray, orders: FloatArray, x: FloatArray) -> FloatArray:
    """An upper bound on the curve at orders ``x``: its value at the smallest grid order
    ≥ x (Rényi divergence is non-decreasing in the order); ∞ beyond the grid."""
    idx = np.searchsorted(orders, x - 1e-12, side="left")
    out = np.full(x.shape, np.inf)
    ok = idx < len(orders)
    out[ok] = curve[idx[ok]]
    return out


def group2_rdp(curve: FloatArray, orders: FloatArray = ORDERS) -> FloatArray:
    """RDP of a mechanism at group size 2 from its curve ε(·) at group size 1, by the weak
    triangle inequality (Mironov 2017, with p = q = 2):

    .. math::
        D_\\alpha(P\\|R) \\le \\frac{\\alpha - 1/2}{\\alpha - 1} D_{2\\alpha}(P\\|Q)
        + D_{2\\alpha - 1}(Q\\|R)

    for every P ~ Q ~ R, so ε₂(α) ≤ (α − ½)/(α − 1)·ε(2α) + ε(2α − 1). Holds for any
    mechanism; per step of an adaptive composition too (each step's bound holds given the
    past), so converted curves compose by summation.
    """
    o = np.asarray(orders, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = ((o - 0.5) / (o - 1.0) * _at_least(curve, o, 2.0 * o)
               + _at_least(curve, o, 2.0 * o - 1.0))
    return np.asarray(out, dtype=np.float64)


#: RDP curves of recorded events by the event's JSON (computing one can take seconds);
#: :class:`dpgnn_core.budget.BudgetStore` persists it in its ``rdp_cache`` table.
RDP_CACHE: dict[str, FloatArray] = {}
RDP_NEW: set[str] = set()


def event_key(event: PrivacyEvent) -> str:
    return json.dumps(event.to_dict(), sort_keys=True)


def event_rdp(event: PrivacyEvent) -> FloatArray:
    """The RDP curve of one event at :data:`ORDERS` (cached, see :data:`RDP_CACHE`)."""
    from dpgnn_core.privacy.accountants import RdpAccountant

    key = event_key(event)
    out = RDP_CACHE.get(key)
    if out is None:
        out = np.asarray(RdpAccountant(ORDERS).event_rdp(event), dtype=np.float64)
        out.setflags(write=False)
        RDP_CACHE[key] = out
        RDP_NEW.add(key)
    return out


# --- charges -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Curve:
    """A release recorded by its RDP curve rather than by events: a private selection
    (Papernot & Steinke's tuning mechanism has an RDP curve, :func:`tuning_rdp`).

    Attributes:
        level (str), relation (str): the candidates' unit and relation.
        orders (tuple of float), rdp (tuple of float): the curve.
        tv (float): a bound on the total-variation distance between what runs and the
            mechanism the curve is for (conditioning on a data-independent event of
            probability ≤ p moves the output by ≤ p in total variation; private selection
            redrew colliding seeds before issue 33 and records p in its older records; it
            records 0 now). (default: :obj:`0.0`)
        epsilon (float), delta (float): the mechanism's own (ε, δ), for display.
    """

    level: str
    relation: str
    orders: tuple[float, ...]
    rdp: tuple[float, ...]
    tv: float = 0.0
    epsilon: float | None = None
    delta: float | None = None

    def __post_init__(self) -> None:
        if len(self.orders) != len(self.rdp) or not self.orders:
            raise PrivacyError("a recorded RDP curve needs one value per order")
        if any(not v >= 0 for v in self.rdp):
            raise PrivacyError("RDP values must be >= 0 (inf for an unusable order)")
        if not 0 <= self.tv < 1:
            raise PrivacyError(f"tv must lie in [0, 1), got {self.tv!r}")

    def at_orders(self) -> FloatArray:
        """The curve on :data:`ORDERS` (upper bound from the recorded orders)."""
        o = np.asarray(self.orders, dtype=np.float64)
        order = np.argsort(o)
        return _at_least(np.asarray(self.rdp, dtype=np.float64)[order], o[order], ORDERS)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "rdp_curve", "level": self.level, "relation": self.relation,
                "orders": list(self.orders), "rdp": list(self.rdp), "tv": self.tv,
                "epsilon": self.epsilon, "delta": self.delta}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Curve:
        return cls(d["level"], d["relation"], tuple(float(x) for x in d["orders"]),
                   tuple(float(x) for x in d["rdp"]), float(d.get("tv", 0.0)),
                   d.get("epsilon"), d.get("delta"))


@dataclass(frozen=True)
class Charge:
    """One recorded release: its ledger, its RDP curve, or a fixed (ε, δ) for one unit and
    relation (``fixed``: only ε = ∞ is admitted under a budget: an insecure run)."""

    ledger: Ledger | None = None
    fixed: tuple[float, float, str, str] | None = None  # (ε, δ, level, relation)
    curve: Curve | None = None

    def levels(self) -> set[tuple[str, str]]:
        """The (level, relation) pairs it is stated at."""
        if self.fixed is not None:
            return {(self.fixed[2], self.fixed[3])}
        if self.curve is not None:
            return {(self.curve.level, self.curve.relation)}
        return {(e.level, e.relation) for e in (self.ledger or Ledger()).events}

    def units(self) -> set[str]:
        """The units it is a guarantee for (before conversion)."""
        return {source_unit(lv, rel)[0] for lv, rel in self.levels()}

    def bears_on(self) -> set[str]:
        """Every unit it bounds, directly or by a conversion."""
        return {u for u in UNITS for lv, rel in self.levels() if group_size(lv, rel, u)}


@dataclass(frozen=True)
class Cost:
    """What one charge costs one unit: an RDP curve at :data:`ORDERS`, the μ² of the
    Gaussian DP it is when it is a Gaussian mechanism (else None), a fixed (ε, δ) and a
    total-variation term. ``rdp`` all ∞ with ``fixed`` (∞, 0) means no bound."""

    rdp: FloatArray
    mu2: float | None
    fixed: tuple[float, float] | None
    tv: float
    direct: bool  # group size 1, an event-by-event ledger: PLD may compose it


INF_CURVE: FloatArray = np.full(ORDERS.shape, np.inf)


def _event_cost(entry: LedgerEntry, unit: str) -> tuple[FloatArray, float | None, bool]:
    ev = entry.event
    g = group_size(ev.level, ev.relation, unit)
    if g == 0:
        return INF_CURVE, None, False
    rdp = event_rdp(ev)
    gaussian = isinstance(ev, GaussianEvent)
    mu2 = (ev.count / ev.noise_multiplier ** 2) if isinstance(ev, GaussianEvent) else None
    if g == 1:
        return rdp, mu2, True
    if gaussian:  # sensitivity at group size g is g·Δ (triangle inequality): exact
        return rdp * g * g, (mu2 or 0.0) * g * g, False
    if g == 2:
        return group2_rdp(rdp), None, False
    return INF_CURVE, None, False  # larger groups: not claimed


def cost(charge: Charge, unit: str) -> Cost:
    """What ``charge`` costs ``unit`` (see :class:`Cost`)."""
    if charge.fixed is not None:
        eps, delta, level, rel = charge.fixed
        g = group_size(level, rel, unit)
        if g == 0 or not math.isfinite(eps):
            return Cost(INF_CURVE, None, (math.inf, 0.0), 0.0, False)
        if g == 2:  # (ε, δ) group privacy: (2ε, (1 + e^ε) δ)
            eps, delta = 2.0 * eps, (1.0 + math.exp(min(eps, 700.0))) * delta
        return Cost(INF_CURVE, None, (eps, delta), 0.0, False)
    if charge.curve is not None:
        c = charge.curve
        g = group_size(c.level, c.relation, unit)
        base = c.at_orders()
        rdp = base if g == 1 else group2_rdp(base) if g == 2 else INF_CURVE
        return Cost(rdp, None, None, c.tv if g else 0.0, False)
    total = np.zeros(ORDERS.shape)
    mu2: float | None = 0.0
    direct = True
    for entry in (charge.ledger or Ledger()).entries:
        r, m, d = _event_cost(entry, unit)
        total = total + r
        mu2 = None if (mu2 is None or m is None) else mu2 + m
        direct = direct and d
    return Cost(total, mu2, None, 0.0, direct)


# --- post hoc: the tightest sound figure for the recorded sequence -----------------------

#: PLD (tighter, ~0.5 s per DP-SGD event) is tried on at most this many events of a unit
#: whose every event bounds it directly; beyond, RDP alone.
PLD_MAX_EVENTS = 4


@dataclass(frozen=True)
class UnitSpent:
    """ε spent on one protection unit, at ``delta``: post hoc, for the fixed sequence of
    releases recorded (the filter, not this figure, admits runs).

    Attributes:
        unit (str): the unit.
        epsilon (float): the composition's ε (∞: some release bounds nothing about it).
        delta (float): its δ.
        relations (tuple of str): the relations of the releases counted.
        method (str): how it was composed, in words.
        unbounded (tuple of str): why it is ∞, when it is.
    """

    unit: str
    epsilon: float
    delta: float
    relations: tuple[str, ...]
    method: str
    unbounded: tuple[str, ...] = ()


def _rdp_epsilon(rdp: FloatArray, delta: float) -> float:
    if not np.isfinite(rdp).any():
        return math.inf
    return epsilon_from_rdp(ORDERS, rdp, delta)[0]


def _epsilon_with_tv(rdp: FloatArray, delta: float, tv: float) -> float:
    """ε of a curve at ``delta`` when the run is ``tv``-close to the mechanism the curve is
    for: H_ε(real) ≤ H_ε(ideal) + (1 + e^ε)·tv, so convert at δ − (1 + e^E)·tv and accept
    the answer only when it is ≤ E."""
    if tv == 0:
        return _rdp_epsilon(rdp, delta)
    guess = _rdp_epsilon(rdp, delta) + 1.0
    for _ in range(4):
        left = delta - (1.0 + math.exp(min(guess, 700.0))) * tv
        if left <= 0:
            return math.inf
        eps = _rdp_epsilon(rdp, left)
        if eps <= guess:
            return eps
        guess = eps + 1.0
    return math.inf



def compose(charges: Sequence[Charge], delta: float,
            units: Sequence[str] | None = None) -> dict[str, UnitSpent]:
    """Post hoc ε per protected unit of the fixed sequence ``charges`` at ``delta``.

    Every charge is counted in every unit it bears on (its conversion), and costs ∞ in a
    shown unit it bounds nothing about. Ledgers' events compose by summing RDP curves
    (tight conversion) and, for a few events that all bound the unit directly, PLD too
    (the smaller ε; both are upper bounds); RDP curves of private selections add to the
    sum; fixed (ε, δ) charges by basic composition (their δ is taken out first; ∞ if their
    δ's reach ``delta``).

    Args:
        charges (sequence of Charge): the recorded releases.
        delta (float): δ of each unit's guarantee.
        units (sequence of str, optional): the units to report. (default: the units the
            charges are stated at, without conversions)

    Returns:
        dict: unit -> :class:`UnitSpent`.
    """
    from dpgnn_core.privacy.accountants import PldAccountant

    if not 0 < delta < 1:
        raise PrivacyError(f"delta must lie in (0, 1), got {delta!r}")
    charges = [c for c in charges if c.levels()]
    shown = list(units) if units is not None else [
        u for u in UNITS if any(u in c.units() for c in charges)]
    out: dict[str, UnitSpent] = {}
    for unit in sorted(shown, key=UNITS.index):
        costs = [cost(c, unit) for c in charges]
        rels = tuple(sorted({rel for c in charges for _lv, rel in c.levels()}))
        why = tuple(sorted({f"{lv}/{rel}" for c in charges for lv, rel in c.levels()
                            if not group_size(lv, rel, unit)}))
        f_eps = sum(c.fixed[0] for c in costs if c.fixed is not None)
        f_delta = sum(c.fixed[1] for c in costs if c.fixed is not None)
        if why or not math.isfinite(f_eps):
            out[unit] = UnitSpent(unit, math.inf, delta, rels,
                                  "a release bounds nothing about this unit",
                                  why or ("an insecure release (ε = ∞)",))
            continue
        curves = [c for c in costs if c.fixed is None]
        left = delta - f_delta
        if left <= 0:
            out[unit] = UnitSpent(unit, math.inf, delta, rels,
                                  f"fixed (ε, δ) charges take δ = {f_delta:.3g} ≥ {delta:g}",
                                  ("fixed charges' δ exceeds the δ",))
            continue
        hows = []
        if f_eps or f_delta:
            hows.append(f"{len(costs) - len(curves)} fixed (ε, δ) charge(s) by basic "
                        "composition")
        eps = 0.0
        if curves:
            rdp = np.sum([c.rdp for c in curves], axis=0)
            tv = sum(c.tv for c in curves)
            eps = _epsilon_with_tv(rdp, left, tv)
            how = "RDP"
            entries = [e for c in charges if c.ledger is not None
                       for e in c.ledger.entries]
            if (all(c.direct for c in curves) and all(c.ledger is not None for c in charges
                                                      if c.fixed is None)
                    and 0 < len(entries) <= PLD_MAX_EVENTS):
                try:
                    pld = PldAccountant().epsilon(Ledger(tuple(entries)), left)
                except PrivacyError:  # an event without a PLD
                    pld = math.inf
                if pld < eps:
                    eps, how = pld, "PLD"
            converted = any(not c.direct for c in curves)
            hows.append(f"{how} composition of {len(curves)} release(s)"
                        + (" (some by group privacy)" if converted else ""))
        out[unit] = UnitSpent(unit, eps + f_eps, delta, rels, "; ".join(hows))
    return out


# --- the filter: what admits a run -------------------------------------------------------


def _conversion_offset(order: float, delta: float) -> float:
    """c with ε = ρ + c: the (Canonne-Kamath-Steinke) conversion of (α, ρ)-RDP to (ε, δ)
    at one order, as dp-accounting computes it (linear in ρ)."""
    return math.log1p(-1.0 / order) - math.log(delta * order) / (order - 1.0)


def gdp_delta(mu: float, epsilon: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth, Su 2019): Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    if mu <= 0:
        return 0.0
    # Φ: scipy.stats' norm.cdf is ndtr. e^ε Φ(x) as exp(ε + log Φ(x)): e^ε alone
    # overflows past ε ≈ 709 (`budget set --epsilon 1000` raised OverflowError), the
    # product does not (it is at most Φ(−ε/μ + μ/2) ≤ 1).
    return float(ndtr(-epsilon / mu + mu / 2.0)
                 - math.exp(epsilon + float(log_ndtr(-epsilon / mu - mu / 2.0))))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ with δ_μ(ε) ≤ ``delta`` (bisection; δ_μ(ε) increases with μ)."""
    from scipy.optimize import brentq

    hi = 1.0
    while gdp_delta(hi, epsilon) < delta:
        hi *= 2.0
    mu = float(brentq(lambda m: gdp_delta(m, epsilon) - delta, 1e-9, hi, xtol=1e-12))
    while gdp_delta(mu, epsilon) > delta:  # keep the feasible side
        mu *= 1.0 - 1e-9
    return mu


#: Share of δ kept for total-variation terms (private selection's seed collisions).
TV_SHARE = 0.05
#: How many Rényi orders a filter registers (plus the Gaussian-DP component).
FILTER_ORDERS = 4


def filter_orders(epsilon: float, delta: float, count: int = FILTER_ORDERS) -> list[float]:
    """The orders a filter for (ε, δ) registers, chosen before any run: spread (factor 2
    apart) around α* = 1 + 2·log(1/δ)/ε, the order where a composition of Gaussians that
    just spends ε converts best (for μ-GDP-like curves ρ = α/(2σ²), the optimal order is
    1 + √(log(1/δ)/ρ) and ρ ≈ ε²/(4 log(1/δ)) when ε ≪ log(1/δ)), snapped to
    :data:`ORDERS`; orders whose conversion alone uses up ε are dropped."""
    star = 1.0 + 2.0 * math.log(1.0 / delta) / epsilon
    share = delta * (1.0 - TV_SHARE) / (count + 1)
    picked: list[float] = []
    for k in range(count):
        target = 1.0 + (star - 1.0) * 2.0 ** (k - (count - 1) / 2.0)
        o = float(ORDERS[np.argmin(np.abs(ORDERS - target))])
        if o > 1.01 and o not in picked and epsilon - _conversion_offset(o, share) > 0:
            picked.append(o)
    return sorted(picked)


@dataclass(frozen=True)
class Filter:
    """A privacy filter for a budget (ε, δ) per unit, registered when the budget is set.

    Components j = 1..k: Rényi filters (Feldman & Zrnic 2021) at fixed orders α_j with
    bounds B_j, each converting to (ε, δ_j); component k+1: a Gaussian-DP filter (Smith &
    Thakurta 2022; Whitehouse et al. 2023) with μ_B, for units where every release is a
    Gaussian mechanism. A run is admitted for a unit when *some* component still holds
    for the whole sequence with it: Σ ρ_i(α_j) ≤ B_j, or every release Gaussian with
    Σ μ_i² ≤ μ_B². Because the component is chosen after seeing the runs, δ is split:
    δ = Σ δ_j + δ_GDP + δ_TV (docs/privacy.md derives that this is (ε, δ)-DP under fully
    adaptive composition).

    Attributes:
        epsilon (float), delta (float): the budget per unit.
        orders (tuple of float): α_j.
        bounds (tuple of float): B_j.
        mu (float): μ_B.
        tv (float): the total-variation allowance Σ tv_i ≤ tv.
        units (tuple of str, optional): the units the budget protects; None: the units of
            the epoch's first release (:func:`protected_units`).
    """

    epsilon: float
    delta: float
    orders: tuple[float, ...]
    bounds: tuple[float, ...]
    mu: float
    tv: float
    units: tuple[str, ...] | None = None

    @classmethod
    def register(cls, epsilon: float, delta: float, units: Sequence[str] | None = None,
                 count: int = FILTER_ORDERS) -> Filter:
        """The filter for a budget (ε, δ), fixed now, before any run it admits.

        Args:
            epsilon (float): budget ε per unit.
            delta (float): budget δ.
            units (sequence of str, optional): the protected units (default: those of
                the epoch's first release).
            count (int, optional): Rényi orders. (default: :data:`FILTER_ORDERS`)
        """
        if not (epsilon > 0 and math.isfinite(epsilon)):
            raise PrivacyError(f"budget epsilon must be finite and > 0, got {epsilon!r}")
        if not 0 < delta < 1:
            raise PrivacyError(f"budget delta must lie in (0, 1), got {delta!r}")
        if units is not None:
            bad = [u for u in units if u not in UNITS]
            if bad or not units:
                raise PrivacyError(f"unknown protected unit(s) {bad or units}; known: "
                                   f"{list(UNITS)}")
            family_of(units)
        orders = filter_orders(epsilon, delta, count)
        share = delta * (1.0 - TV_SHARE) / (len(orders) + 1)
        bounds = [epsilon - _conversion_offset(o, share) for o in orders]
        return cls(float(epsilon), float(delta), tuple(orders), tuple(bounds),
                   gdp_mu(epsilon, share),
                   # δ·s/(1 + e^ε), written with e^-ε: e^ε overflows past ε ≈ 709
                   delta * TV_SHARE * math.exp(-epsilon) / (1.0 + math.exp(-epsilon)),
                   tuple(sorted(set(units), key=UNITS.index)) if units else None)

    @property
    def component_delta(self) -> float:
        return self.delta * (1.0 - TV_SHARE) / (len(self.orders) + 1)

    def protected(self, charges: Sequence[Charge]) -> tuple[str, ...]:
        """The units this budget bounds for ``charges``."""
        return protected_units(charges, self.units)

    def check(self, charges: Sequence[Charge], unit: str) -> FilterState:
        """Whether the filter admits the sequence ``charges`` for ``unit``."""
        costs = [cost(c, unit) for c in charges if c.levels()]
        why = sorted({f"{lv}/{rel}" for c in charges for lv, rel in c.levels()
                      if not group_size(lv, rel, unit)})
        fixed = [c.fixed for c in costs if c.fixed is not None]
        if why or any(not math.isfinite(f[0]) for f in fixed):
            return FilterState(unit, False, (), math.inf, None,
                               "releases at " + ", ".join(why) + " bound nothing about it"
                               if why else "an insecure release (ε = ∞)")
        if fixed:
            return FilterState(unit, False, (), math.inf, None,
                               "a fixed (ε, δ) charge has no RDP curve: a filter cannot "
                               "admit it (record its mechanism's RDP curve)")
        tv = sum(c.tv for c in costs)
        rdp = np.sum([c.rdp for c in costs], axis=0) if costs else np.zeros(ORDERS.shape)
        idx = [int(np.argmin(np.abs(ORDERS - o))) for o in self.orders]
        used = tuple(float(rdp[i] / b) for i, b in zip(idx, self.bounds, strict=True))
        mu2s = [c.mu2 for c in costs]
        gdp = (None if any(m is None for m in mu2s)
               else float(sum(m for m in mu2s if m is not None)) / self.mu ** 2)
        fits = min([*used, *([gdp] if gdp is not None else [])], default=0.0)
        ok = fits <= 1.0 + 1e-9 and tv <= self.tv
        note = "" if tv <= self.tv else (f"total-variation terms {tv:.3g} exceed the "
                                         f"filter's allowance {self.tv:.3g}")
        return FilterState(unit, ok, used, fits, gdp, note)

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "orders": list(self.orders),
                "bounds": list(self.bounds), "mu": self.mu, "tv": self.tv,
                "units": list(self.units) if self.units else None,
                "component_delta": self.component_delta}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Filter:
        return cls(float(d["epsilon"]), float(d["delta"]), tuple(d["orders"]),
                   tuple(d["bounds"]), float(d["mu"]), float(d["tv"]),
                   tuple(d["units"]) if d.get("units") else None)

    def describe(self) -> str:
        parts = [f"α = {o:g}: Σ RDP ≤ {b:.4g}" for o, b in
                 zip(self.orders, self.bounds, strict=True)]
        return (f"privacy filter for (ε = {self.epsilon:g}, δ = {self.delta:g}), fixed at "
                f"`budget set`: a run is admitted while one component holds for the whole "
                f"sequence: Rényi {'; '.join(parts)}; or all releases Gaussian with "
                f"Σ μ² ≤ {self.mu ** 2:.4g} (μ-GDP); δ split "
                f"{len(self.orders) + 1} ways ({self.component_delta:.3g} each)")


@dataclass(frozen=True)
class FilterState:
    """The filter's reading for one unit.

    Attributes:
        unit (str): the unit.
        admits (bool): whether the sequence fits.
        used (tuple of float): Σ RDP(α_j) / B_j per registered order.
        fits (float): the smallest used fraction over every component (≤ 1: admitted).
        gdp (float, optional): Σ μ² / μ_B² when every release is Gaussian.
        note (str): why not, when it is ∞.
    """

    unit: str
    admits: bool
    used: tuple[float, ...]
    fits: float
    gdp: float | None
    note: str = ""


__all__ = ["CANONICAL", "FAMILIES", "IMPLIES", "ORDERS", "UNITS", "UNIT_WORDS", "Charge",
           "Cost", "Curve", "Filter", "FilterState", "UnitSpent", "compose", "cost",
           "event_rdp", "family_of", "filter_orders", "gdp_delta", "gdp_mu", "group2_rdp",
           "group_size", "protected_units", "shown_units", "source_unit"]
