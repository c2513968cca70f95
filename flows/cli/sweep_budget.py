"""``dpgnn sweep`` on a budgeted dataset: what the budget refuses before Prefect and Dask
start (issue 48 §5: a sweep's budget refusals came after the Dask cluster started, 22-50 s
later, exit 1).

* A sweep none of whose points the budget admits outright (every point non-private or
  with an unaccounted option, without ``--allow-non-private-release``, or releasing at a
  level that bounds nothing about a protected unit) is refused in one line. A sweep with
  some such points still runs the others and marks these in its table
  (:func:`flows.sweep.admitted`).
* The sweep's new private releases, checked together against the budget's filter as if
  reserved one after the other (:meth:`dpgnn_core.budget.BudgetStore.check`): each flagged
  point's calibrated plan (:func:`dpgnn_core.methods.early_plan.planned_ledger`; a point
  already released on this dataset is re-used at no cost, unless ``--refresh``), or each
  private selection's tuning mechanism (:func:`flows.sweep_tuning.tuning_charge` of
  :func:`dpgnn_core.sweep_tuning.plan_private_selection`, what the flow reserves). A
  release the budget refuses on its own is left to the flow, which marks its point refused
  and runs the others (a sweep all of whose new releases are refused so, and that has no
  other point, is refused here). The releases the budget admits one by one must fit
  together, or the sweep is refused whole, before anything trains: which of them the
  budget would admit otherwise depends on the order in which they finish.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpgnn_core.errors import PrivacyError


def refuse_sweep_over_budget(spec: Any, pts: list[Any], manifest: dict[str, Any], *,
                             refresh: bool, allow_non_private_release: bool) -> None:
    """The module docstring's checks; nothing to do on a dataset without a budget, or
    while a reservation is open on it (a run that may resume: the flow decides).

    Raises:
        PrivacyError: one line naming the sweep, the dataset's budget and what to change.
    """
    from tasks.budget import store

    s, sha = store(), str(manifest.get("content_sha256", ""))
    bid = s.budget_id(sha)
    if bid is None:
        return
    ds = {"content_sha256": sha, "name": manifest.get("name", Path(spec.dataset).name),
          "path": str(Path(spec.dataset).resolve())}
    pts = _admitted(spec, ds, pts, allow_non_private_release)
    if any(r.status == "reserved" for r in s.summary(bid).records):
        return
    charges, count = _charges(spec, pts, manifest, refresh)
    if not charges:
        return
    from dpgnn_core.budget.report import BudgetExceeded

    alone: list[BudgetExceeded] = []
    fitting = []
    for c in charges:  # a release the budget refuses on its own: the flow marks its point
        try:
            s.check(sha, [c])
            fitting.append(c)
        except BudgetExceeded as e:
            alone.append(e)
    if not fitting and (spec.selection == "private" or count == len(pts)):
        raise PrivacyError(f"sweep {spec.name}: the budget refuses each of its {count} new "
                           f"private release(s) on its own, so nothing would run: {alone[0]}")
    try:
        s.check(sha, fitting)
    except BudgetExceeded as e:
        raise PrivacyError(
            f"sweep {spec.name}: its {len(fitting)} new private release(s) the budget admits "
            f"one by one, checked together before anything starts, do not fit: {e}".replace(
                "this run requests", "they request")) from e


def _admitted(spec: Any, ds: dict[str, Any], pts: list[Any], allowed: bool) -> list[Any]:
    """The points the flow will run (:func:`flows.sweep.admitted`, which records nothing
    without the override; with it, the points whose release bounds the protected units);
    a sweep none of whose points is admitted is refused."""
    if allowed:
        from dpgnn_core.methods.preflight import release_levels
        from tasks.budget import UnitNotBounded, admit_units

        left, first = [], None
        for p in pts:
            try:
                admit_units(ds, p.method, release_levels(p.spec))
                left.append(p)
            except UnitNotBounded as e:
                first = first or str(e)
    else:
        from flows.sweep import admitted

        _allowed, refused, left = admitted(ds, pts, False)
        first = str(refused[0]["refused"]) if refused else None
    if pts and not left:
        raise PrivacyError(f"sweep {spec.name}: the budget refuses each of its {len(pts)} "
                           f"point(s), so nothing would run: {first}")
    return list(left)


def _charges(spec: Any, pts: list[Any], manifest: dict[str, Any], refresh: bool
             ) -> tuple[list[Any], int]:
    """The charges of the sweep's new private releases, and how many releases they are."""
    from dpgnn_core.methods.preflight import n_train

    if spec.selection == "private":
        from dpgnn_core.sweep_tuning import plan_private_selection
        from flows.sweep_tuning import tuning_charge

        n = n_train(None, manifest)
        plans = plan_private_selection(spec, pts, n) if any(
            p.epsilon is not None for p in pts) else []
        return [tuning_charge(plan) for plan in plans], len(plans)
    from dpgnn_core.methods.early_plan import planned_ledger
    from flows.cli.execute import charge_of, structure_of
    from tasks.budget import plan_key, store

    s, sha = store(), str(manifest.get("content_sha256", ""))
    structure = structure_of(Path(spec.dataset), manifest)
    planned: dict[str, Any] = {}  # points that differ only in their seed plan alike
    charges = []
    for p in pts:
        if p.epsilon is None or (not refresh and s.released_plan(
                sha, plan_key({"content_sha256": sha}, p.spec))):
            continue
        key = json.dumps({k: v for k, v in p.spec.model_dump(mode="json").items()
                          if k != "seed"}, sort_keys=True)
        if key not in planned:
            planned[key] = planned_ledger(p.spec, n_train(p.spec, manifest), structure)
        ledger = planned[key]
        charge = charge_of(p.spec, ledger) if ledger is not None else None
        if charge is not None:
            charges.append(charge)
    return charges, len(charges)


__all__ = ["refuse_sweep_over_budget"]
