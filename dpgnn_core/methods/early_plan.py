"""A run's calibrated privacy plan computed from its spec and the dataset's manifest alone,
before any data is loaded: what the command line checks against the dataset's budget
before Prefect starts (issue 48 §5: a plan the budget cannot hold was refused only
inside the flow, 6-16 s later).

The plan is the one the method's fit calibrates and hands the budget keeper
(:func:`dpgnn_core.privacy.gate.before_release`): the same spec resolution (the batch
size adapted to N_train, "train until spent" steps), the method's registered
``ledger_for`` and the same calibration (:func:`~dpgnn_core.privacy.calibrate.
calibrate_noise` to ``spec.epsilon`` at δ = ``spec.delta`` or 1/(10 N_train)). Only the
families whose plan depends on nothing but the spec and N_train are computed here
(:data:`FAMILIES`); for any other (DP-GNN resolves its degree bound from the edges, DRW
its partitions) :func:`planned_ledger` returns None and the flow's check is the only one.
The flow checks every plan again in any case: this one only refuses earlier.
"""

from __future__ import annotations

import warnings
from typing import Any

from dpgnn_core.errors import PrivacyError
from dpgnn_core.methods.catalog import entry
from dpgnn_core.privacy import Ledger

#: The families whose fit calibrates ``ledger_for(resolved spec, N_train)`` with nothing
#: read from the data but N_train (dp-mlp, graph-cls: ``with_batch_size`` and
#: ``resolve_steps``; GAP: its ``ledger_for`` adapts the batch size itself, and
#: :func:`~dpgnn_core.methods._staged.solve_composition` calibrates it).
FAMILIES = frozenset({"dp-mlp", "graph-cls", "gap"})


def _resolved(spec: Any, family: str, n_train: int, ledger_for: Any) -> Any:
    """The spec as the family's fit calibrates it."""
    from dpgnn_core.methods._private import resolve_steps

    if family == "gap":
        return spec
    spec = spec.with_batch_size(n_train)
    return resolve_steps(spec, n_train, ledger_for)


def planned_ledger(spec: Any, n_train: int) -> Ledger | None:
    """The ledger of ``spec``'s whole calibrated plan on a dataset of ``n_train`` training
    records, or None when it cannot be known before the data is loaded (a family outside
    :data:`FAMILIES`, a non-private run, GAP-∞, no training records) or cannot be
    calibrated at all (the flow then says why, in its own words).

    Imports the method's module (torch), not Prefect; pure arithmetic otherwise.
    """
    if getattr(spec, "epsilon", None) is None or n_train < 1:
        return None
    family = entry(spec.method).family
    if family not in FAMILIES or getattr(spec, "level", None) == "none":
        return None
    from dpgnn_core.methods import registry
    from dpgnn_core.privacy import calibrate_noise, make_accountant

    method = registry.get(spec.method)
    try:
        with warnings.catch_warnings():  # the fit warns about weak settings, not this
            warnings.simplefilter("ignore")
            spec = _resolved(spec, family, n_train, method.ledger_for)
            plan = method.ledger_for(spec, n_train)
            delta = spec.delta if spec.delta is not None else 1.0 / (10 * n_train)
            kw: dict[str, Any] = {}
            if family == "gap":
                from dpgnn_core.methods._staged import MAX_NOISE

                kw["max_noise"] = MAX_NOISE
            if getattr(spec, "noise_multiplier", None) is not None and family != "gap":
                z = float(spec.noise_multiplier)
            else:
                z = calibrate_noise(plan, spec.epsilon, delta,
                                    make_accountant(spec.accountant), **kw).noise_multiplier
            ledger = plan(z)
    except (PrivacyError, ValueError):  # the flow refuses it, naming the reason
        return None
    return ledger if ledger.entries else None


__all__ = ["FAMILIES", "planned_ledger"]
