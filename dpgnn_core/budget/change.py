"""What a ``budget set`` on a dataset that already has a budget may do (pure: no SQLite).

A privacy filter's guarantee needs its bound fixed before the runs it admits. So, within an
epoch (:meth:`dpgnn_core.budget.BudgetStore.reset` starts one):

* **before the epoch's first release** (nothing reserved, spent or released without
  privacy in it), a budget may be set or changed freely: it is still fixed in advance;
* **after it**, a budget may only be **lowered** (ε and δ no larger, the same protected
  units) and only to a bound the filter still admits the epoch's releases under. Runs are
  then admitted only when both the new filter and the one fixed in advance admit them; the
  epoch's *guarantee* stays the one fixed in advance, because the lowered bound was chosen
  after seeing releases (a bound picked from the outputs is not a bound fixed in advance);
* **raising or replacing** it (a larger ε or δ, other units) ends the epoch's guarantee:
  refused unless the explicit, recorded override (``dpgnn budget set --replace --yes``),
  which starts a new epoch, as ``dpgnn budget reset`` does, under the new budget. The old
  epoch's releases keep the old epoch's guarantee only, and no guarantee is claimed for the
  two epochs together (the new bound was chosen after seeing the old epoch's releases).

Derivation: docs/privacy.md, "Changing a budget".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpgnn_core.budget.report import Budget, BudgetChangeRefused
from dpgnn_core.privacy.odometer import Charge, Filter, FilterState

#: The override that raises or replaces a budget within an epoch (ends its guarantee).
REPLACE_FLAG = "--replace --yes"


@dataclass(frozen=True)
class Change:
    """What a ``budget set`` does.

    Attributes:
        kind (str): ``"set"`` (no budget, or nothing released this epoch: fixed in
            advance), ``"lower"`` (a lowered bound within the epoch) or ``"replace"`` (a
            new epoch under the new budget; only with the override).
        admit (Filter): the filter that admits runs from now on.
        guarantee (Filter): the filter the (new) epoch's guarantee is stated by.
    """

    kind: str
    admit: Filter
    guarantee: Filter


def _units_of(flt: Filter, charges: Sequence[Charge]) -> set[str]:
    return set(flt.protected(charges))


def decide(old: Budget, old_filter: Filter | None, new: Filter, charges: Sequence[Charge],
           started: bool, replace: bool) -> Change:
    """What setting ``new`` on ``old`` does (:class:`Change`), or why it is refused.

    Args:
        old (Budget): the budget now.
        old_filter (Filter, optional): its admission filter (None: no budget).
        new (Filter): the filter of the budget asked for.
        charges (sequence of Charge): this epoch's counted releases.
        started (bool): the epoch already released something (counted or non-private).
        replace (bool): the override was given.

    Raises:
        BudgetChangeRefused: a raise or replacement without the override, or a lowered
            bound the epoch's releases already exceed.
    """
    if old_filter is None or old.epsilon is None or not started:
        return Change("set", new, new)
    if replace:
        return Change("replace", new, new)
    assert old.delta is not None
    guarantee = old.stated or old_filter
    if new.units is None and old_filter.units is not None:  # keep what it protects
        new = Filter.register(new.epsilon, new.delta, old_filter.units)
    what = (f"budget of {old.name} (ε = {old.epsilon:g} at δ = {old.delta:g}, epoch "
            f"{old.epoch}, which has released)")
    lower = new.epsilon <= old.epsilon and new.delta <= old.delta
    if not lower or _units_of(new, charges) != _units_of(old_filter, charges):
        raise BudgetChangeRefused(
            f"refused to raise or replace the {what} with ε = {new.epsilon:g} at δ = "
            f"{new.delta:g}" + (f" protecting {', '.join(new.units)}" if new.units else "")
            + ": the privacy filter's guarantee needs its bound fixed before the runs it "
            f"admits. Pass {REPLACE_FLAG} to end this epoch's guarantee here and start a "
            "new epoch under the new budget (recorded; like `dpgnn budget reset`), or "
            "lower it instead")
    over = [u for u in new.protected(charges) if not new.check(charges, u).admits]
    if over:
        raise BudgetChangeRefused(
            f"refused to lower the {what} to ε = {new.epsilon:g} at δ = {new.delta:g}: "
            f"unit(s) {', '.join(over)} already spent more than the lowered filter admits, "
            f"so it would bound nothing. Keep the budget, or pass {REPLACE_FLAG} to end "
            "this epoch's guarantee and start a new epoch")
    return Change("lower", new, guarantee)


def admission_state(b: Budget, flt: Filter, charges: Sequence[Charge], unit: str
                    ) -> FilterState:
    """The filter's reading for ``unit``; after a lowering, the more used of the lowered
    filter and the one fixed in advance (a run needs both to admit it)."""
    state = flt.check(charges, unit)
    if not b.lowered or b.guarantee is None:
        return state
    fixed = b.guarantee.check(charges, unit)
    if (state.admits and not fixed.admits) or (state.admits == fixed.admits
                                               and fixed.fits > state.fits):
        return fixed
    return state


def describe(change: Change, old: Budget, reason: str = "") -> str:
    """The log line of a change (``budget show`` prints the log)."""
    new = change.admit
    head = f"ε = {new.epsilon:g}, δ = {new.delta:g}"
    was = (f" (was ε = {old.epsilon:g}, δ = {old.delta:g})"
           if old.epsilon is not None and old.delta is not None else "")
    why = f"; reason: {reason}" if reason else ""
    if change.kind == "lower":
        g = change.guarantee
        return (f"{head}{was}: lowered within epoch {old.epoch}; runs are admitted only "
                f"when this filter and the one fixed before the epoch's first release "
                f"both admit them; the epoch's guarantee stays ε = {g.epsilon:g} at δ = "
                f"{g.delta:g} (a bound chosen after seeing releases is not fixed in "
                f"advance){why}")
    if change.kind == "replace":
        return (f"{head}{was}, by {REPLACE_FLAG}: the guarantee of epoch {old.epoch} ended "
                f"here (it covers that epoch's releases only, listed with `budget show "
                f"--all`); epoch {old.epoch + 1} starts under the new budget{why}")
    return f"{head}{was}{why}"


__all__ = ["REPLACE_FLAG", "Change", "admission_state", "decide", "describe"]
