"""A run's calibrated privacy plan computed from its spec, the dataset's manifest and (for
DP-GNN's structure defaults) its edge list, before any training: what the command line
checks against the dataset's budget before Prefect starts (issue 48 §5: a plan the budget
cannot hold was refused only inside the flow, 6-16 s later).

The plan is the one the method's fit calibrates and hands the budget keeper
(:meth:`~dpgnn_core.methods.private_run.PrivateRun.reserve`), computed by the fit's own
functions:

* the spec as the fit resolves it (:data:`RESOLVE`): DP-MLP and graph classification
  adapt the batch size and resolve "train until spent" steps
  (:func:`~dpgnn_core.methods._private.resolve_row_plan`); DP-GNN fills K and the batch
  from the public degrees at level ``node_feature``
  (:func:`~dpgnn_core.methods.dp_gnn.resolve_plan_spec`, which reads the edge list only
  there); DRW sizes its batch from the partition
  (:func:`~dpgnn_core.methods.drw.resolve_plan_spec`); GAP, ProGAP and DPDGC adapt their
  batch inside their ``ledger_for``;
* the method's registered ``ledger_for`` at δ = ``spec.delta`` or 1/(10 N_train);
* the fit's calibration (:data:`CALIBRATE`): :func:`~dpgnn_core.methods._private.
  calibrate_to_target` (the row and subgraph families),
  :func:`~dpgnn_core.methods._staged.solve_composition` (GAP, ProGAP),
  :func:`~dpgnn_core.methods.dpdgc.calibrate_composition` (DPDGC).

tests/flows/test_issue48_plan_budget.py checks, per family, that this plan's events are
those the fit hands the gate. The flow checks every plan again in any case: this one only
refuses earlier.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from dpgnn_core.errors import DpgnnError, PrivacyError
from dpgnn_core.methods.catalog import entry
from dpgnn_core.privacy import Ledger

#: () ↦ (edge_index ``[2, E]``, N): the dataset's edge list, read when a plan needs it.
Structure = Callable[[], tuple[np.ndarray, int]]


class _Unknown(Exception):
    """The plan needs what the caller did not give (DP-GNN's degrees)."""


def _row(spec: Any, n: int, structure: Structure | None, ledger_for: Any) -> Any:
    from dpgnn_core.methods._private import resolve_row_plan

    return resolve_row_plan(spec, n, ledger_for)


def _dp_gnn(spec: Any, n: int, structure: Structure | None, ledger_for: Any) -> Any:
    from dpgnn_core.methods.dp_gnn import resolve_plan_spec

    if structure is None and spec.level == "node_feature":
        raise _Unknown
    return resolve_plan_spec(spec, n, structure or _no_structure)[0]


def _no_structure() -> tuple[np.ndarray, int]:  # pragma: no cover - read only at node_feature
    raise _Unknown


def _drw(spec: Any, n: int, structure: Structure | None, ledger_for: Any) -> Any:
    from dpgnn_core.methods.drw import resolve_plan_spec

    return resolve_plan_spec(spec, n)


def _as_given(spec: Any, n: int, structure: Structure | None, ledger_for: Any) -> Any:
    return spec  # GAP, ProGAP, DPDGC: their ledger_for adapts the batch size itself


#: family ↦ (spec, N_train, structure, ledger_for) ↦ the spec as its fit calibrates it.
RESOLVE: dict[str, Callable[[Any, int, Structure | None, Any], Any]] = {
    "dp-mlp": _row, "graph-cls": _row, "dp-gnn": _dp_gnn, "drw": _drw,
    "gap": _as_given, "progap": _as_given, "dpdgc": _as_given}


def _target(spec: Any, plan: Callable[[float], Ledger], delta: float) -> float:
    from dpgnn_core.methods._private import calibrate_to_target

    return calibrate_to_target(spec, plan, delta)[0]


def _composition(spec: Any, plan: Callable[[float], Ledger], delta: float) -> float:
    from dpgnn_core.methods._staged import solve_composition

    return solve_composition(spec, plan, delta, {}, spec.method)


def _dpdgc(spec: Any, plan: Callable[[float], Ledger], delta: float) -> float:
    from dpgnn_core.methods.dpdgc import calibrate_composition

    return float(calibrate_composition(spec, plan, delta).noise_multiplier)


#: family ↦ (resolved spec, z ↦ ledger, δ) ↦ the calibrated noise multiplier.
CALIBRATE: dict[str, Callable[[Any, Callable[[float], Ledger], float], float]] = {
    "dp-mlp": _target, "graph-cls": _target, "dp-gnn": _target, "drw": _target,
    "gap": _composition, "progap": _composition, "dpdgc": _dpdgc}

#: The families whose plan is computed here (every private family of the catalogue).
FAMILIES = frozenset(RESOLVE)


def planned_ledger(spec: Any, n_train: int, structure: Structure | None = None
                   ) -> Ledger | None:
    """The ledger of ``spec``'s whole calibrated plan on a dataset of ``n_train`` training
    records, or None when it cannot be known here (a non-private run, a family outside
    :data:`FAMILIES`, no training records, DP-GNN at level ``node_feature`` without
    ``structure``) or cannot be calibrated at all (the flow then says why, in its own
    words).

    Args:
        spec: the run's spec.
        n_train (int): N_train, from the manifest's split counts.
        structure (callable, optional): the dataset's edge list and N, read only by
            DP-GNN's structure defaults. (default: :obj:`None`)

    Imports the method's module (torch), not Prefect; pure arithmetic otherwise.
    """
    if getattr(spec, "epsilon", None) is None or n_train < 1:
        return None
    family = entry(spec.method).family
    if family not in FAMILIES or getattr(spec, "level", None) == "none":
        return None
    from dpgnn_core.methods import registry
    from dpgnn_core.methods._private import plan_delta

    ledger_for = registry.get(spec.method).ledger_for
    try:
        with warnings.catch_warnings():  # the fit warns about weak settings, not this
            warnings.simplefilter("ignore")
            spec = RESOLVE[family](spec, n_train, structure, ledger_for)
            plan = ledger_for(spec, n_train)
            ledger = plan(CALIBRATE[family](spec, plan, plan_delta(spec, n_train)))
    except (_Unknown, PrivacyError, DpgnnError, ValueError):  # the flow refuses it, naming
        return None                                             # the reason
    return ledger if ledger.entries else None


__all__ = ["CALIBRATE", "FAMILIES", "RESOLVE", "Structure", "planned_ledger"]
