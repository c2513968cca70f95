"""What the privacy-budget store (:mod:`dpgnn_core.budget`) hands back and how it is
reported: a dataset's :class:`Budget`, a :class:`Record` of the odometer, the
:class:`Summary` ``dpgnn budget show`` prints, and :class:`BudgetExceeded`, the one line a
refused run ends with. Plain records, no SQLite; :mod:`dpgnn_core.budget` re-exports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpgnn_core.errors import PrivacyError
from dpgnn_core.privacy.odometer import (
    UNIT_WORDS,
    Charge,
    Filter,
    FilterState,
    UnitSpent,
    compose,
)


class BudgetExceeded(PrivacyError):
    """A run's release does not fit a dataset's budget.

    Attributes:
        dataset (str): the dataset (name and sha256 prefix).
        unit (str): the protection unit whose budget it would exceed.
        spent (float), requested (float), cumulative (float), budget (float),
        delta (float): post hoc ε spent so far, this release's own ε, ε after it, the
            budget's ε, all at the budget's ``delta``.
        reason (str): why, when the post hoc figure alone does not say it (the filter
            refuses, or the release bounds nothing about the unit). (default: ``""``)
    """

    def __init__(self, dataset: str, unit: str, spent: float, requested: float,
                 cumulative: float, budget: float, delta: float, reason: str = "") -> None:
        self.dataset, self.unit = dataset, unit
        self.spent, self.requested, self.cumulative = spent, requested, cumulative
        self.budget, self.delta, self.reason = budget, delta, reason
        head = (f"privacy budget of dataset {dataset} exceeded for unit {unit} "
                f"({UNIT_WORDS.get(unit, unit)}): ")
        if math.isinf(requested):  # no ε for this unit at all: not "requests ε = inf"
            msg = (f"this run's release bounds nothing about the protected unit {unit} "
                   f"(spent ε = {spent:.4g} of budget {budget:.4g} at δ = {delta:.3g})"
                   + (f"; {reason}" if reason else ""))
        elif cumulative > budget or not reason:
            msg = (f"spent ε = {spent:.4g}, this run requests ε = {requested:.4g} "
                   f"(cumulative {cumulative:.4g} > budget {budget:.4g} at δ = {delta:.3g})"
                   + (f"; remaining ε = {max(budget - spent, 0.0):.4g}"
                      if math.isfinite(spent) and math.isfinite(requested) else "")
                   + (f"; {reason}" if reason else ""))
        else:
            msg = (f"spent ε = {spent:.4g} (post hoc), this run requests ε = "
                   f"{requested:.4g} (post hoc cumulative {cumulative:.4g} ≤ budget "
                   f"{budget:.4g} at δ = {delta:.3g}), but {reason}")
        super().__init__(head + msg + ". Nothing was trained. See `dpgnn budget show`.")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable: Dask sends it back from workers
        return (type(self), (self.dataset, self.unit, self.spent, self.requested,
                             self.cumulative, self.budget, self.delta, self.reason))


class BudgetChangeRefused(PrivacyError):
    """A ``budget set`` that would raise or replace the budget of an epoch that already
    released something, without the recorded override (``--replace --yes``), or that would
    lower it below what is spent."""


@dataclass(frozen=True)
class Budget:
    """A dataset's budget (``epsilon`` None: none set; the odometer still records).

    ``filter`` admits runs (registered at `budget set`); ``guarantee`` is the filter the
    epoch's guarantee is stated by: the one fixed before the epoch's first release. They
    differ only after a budget was lowered within the epoch (admission then needs both;
    the lowered bound was chosen after seeing releases, so it is not a guarantee fixed in
    advance: docs/privacy.md, "Changing a budget")."""

    budget_id: str
    name: str
    epsilon: float | None
    delta: float | None
    epoch: int
    filter: Filter | None = None  # registered at `budget set`
    guarantee: Filter | None = None  # None: the same as ``filter``
    #: Set after the epoch's first release: ``{"time", "after_release", "releases"}``;
    #: the guarantee covers the releases from ``time`` on only (None: fixed before them).
    covers_from: dict[str, Any] | None = None

    @property
    def stated(self) -> Filter | None:
        """The filter the epoch's guarantee is stated by."""
        return self.guarantee or self.filter

    @property
    def lowered(self) -> bool:
        """The admission bound was lowered within the epoch (below its guarantee)."""
        return self.guarantee is not None and self.guarantee != self.filter


@dataclass(frozen=True)
class Record:
    """One row of the odometer."""

    id: int
    dataset_sha256: str
    created: str
    status: str
    method: str
    run_id: str
    release_id: str | None
    charge: Charge
    delta: float | None
    epsilon: float | None  # the release's own ε as its run reported it
    note: str
    epoch: int

    def to_dict(self) -> dict[str, Any]:
        c = self.charge
        return {"id": self.id, "dataset_sha256": self.dataset_sha256,
                "created": self.created, "status": self.status, "method": self.method,
                "run_id": self.run_id, "release_id": self.release_id,
                "units": sorted(c.units()), "epsilon": self.epsilon, "delta": self.delta,
                "ledger": c.ledger.to_dict() if c.ledger is not None else None,
                "fixed": list(c.fixed) if c.fixed is not None else None,
                "rdp_curve": c.curve.to_dict() if c.curve is not None else None,
                "note": self.note, "epoch": self.epoch}


@dataclass
class Summary:
    """What ``dpgnn budget show`` prints for one dataset."""

    budget: Budget
    datasets: list[dict[str, Any]]
    delta: float | None
    spent: dict[str, UnitSpent]
    records: list[Record]
    log: list[dict[str, Any]] = field(default_factory=list)
    filter: dict[str, FilterState] = field(default_factory=dict)
    #: The first release of this epoch made without privacy (``--allow-non-private-
    #: release``): from it on, no finite guarantee holds for any unit (spent shows ∞).
    void_since: int | None = None

    def void_note(self) -> str:
        """``no guarantee since release N ...`` (``""`` when none was made)."""
        if self.void_since is None:
            return ""
        return (f"no guarantee since release {self.void_since} (released without privacy "
                "by --allow-non-private-release)")

    def remaining(self, unit: str) -> float | None:
        """Budget ε minus the post hoc ε spent (what the filter admits can be less)."""
        if self.budget.epsilon is None or unit not in self.spent:
            return self.budget.epsilon
        return max(self.budget.epsilon - self.spent[unit].epsilon, 0.0)

    def to_dict(self) -> dict[str, Any]:
        b = self.budget
        void = self.void_since is not None  # no finite guarantee: no finite "used" either
        return {"dataset": b.name, "budget_id": b.budget_id,
                "budget": ({"epsilon": b.epsilon, "delta": b.delta}
                           if b.epsilon is not None else None),
                "epoch": b.epoch,
                "guarantee": (None if b.stated is None else {
                    "epsilon": b.stated.epsilon, "delta": b.stated.delta,
                    "lowered_to": ({"epsilon": b.epsilon, "delta": b.delta}
                                   if b.lowered else None),
                    "void_since_release": self.void_since,
                    "fixed_before_first_release": b.covers_from is None,
                    "covers_releases_after": (b.covers_from or {}).get("after_release")}),
                "delta": self.delta, "versions": self.datasets,
                "spent": {u: {"epsilon": _finite(s.epsilon), "delta": s.delta,
                              "relations": list(s.relations), "composition": s.method,
                              "post_hoc": True, "unbounded_by": list(s.unbounded),
                              "remaining": _finite(self.remaining(u))}
                          for u, s in self.spent.items()},
                "filter": (None if b.filter is None else {
                    **b.filter.to_dict(), "description": b.filter.describe(),
                    "void_since_release": self.void_since,
                    "units": {u: {"admits_more": f.admits,
                                  "used": _finite(math.inf if void else f.fits),
                                  "used_by_order": [_finite(x) for x in f.used],
                                  "gdp_used": _finite(f.gdp), "note": f.note}
                              for u, f in self.filter.items()}}),
                "records": [r.to_dict() for r in self.records], "log": self.log}


def timeline(s: Summary) -> dict[str, list[tuple[str, float]]]:
    """Cumulative ε per unit after each counted release of the summary's epoch, in order
    (the odometer over time), at the summary's δ."""
    counted = [r for r in s.records if r.status in ("reserved", "spent")
               and r.epoch == s.budget.epoch]
    out: dict[str, list[tuple[str, float]]] = {}
    if not s.delta:
        return out
    units = list(s.spent)
    for i, r in enumerate(counted):
        now = compose([c.charge for c in counted[:i + 1]], s.delta, units)
        for unit in r.charge.bears_on():
            if unit in now:
                out.setdefault(unit, []).append((r.created, now[unit].epsilon))
    return out


def _finite(x: float | None) -> float | str | None:
    """JSON has no ∞: written as the string ``"inf"``."""
    return "inf" if x is not None and math.isinf(x) else x


__all__ = ["Budget", "BudgetChangeRefused", "BudgetExceeded", "Record", "Summary",
           "timeline"]
