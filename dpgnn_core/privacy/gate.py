"""The release gate: where a run's calibrated plan meets the dataset's privacy budget.

A fit's engine (:class:`~dpgnn_core.methods.private_run.PrivateRun`) holds the gate its
caller handed it and calls :meth:`ReleaseGate.before_release` with its calibrated ledger
(the whole plan) after calibration and before its first private release, and
:meth:`ReleaseGate.released` as soon as something private exists (a trained step, a PMA
release). The core itself keeps no budget: a caller that does (``tasks.budget``, over the
SQLite store of :mod:`dpgnn_core.budget`) passes a :class:`ReleaseGate` to the fit
(``Method.fit(..., gate=...)``); the gate may refuse by raising
(:class:`~dpgnn_core.budget.BudgetExceeded`), before any private data has been released.
Without a gate nothing is reserved (library use).

A staged run whose first stages release nothing private (GAP-EDP's encoder, ProGAP-EDP's
stage 0) has the same plan checked by the gate's ``admit`` (if it has one) before they
train: a budget keeper that can check without reserving refuses there, so a plan the budget
refuses costs no training; the reservation still comes with ``before_release``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from dpgnn_core.privacy.events import Ledger


class ReleaseGate(Protocol):
    """What a budget keeper implements (``admit(ledger, info)``, a check that reserves
    nothing, is optional)."""

    def before_release(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        """Check and reserve ``ledger`` (a run's whole calibrated plan); raise to refuse.
        Called once per computed stage: a second call in one run must not charge again."""

    def released(self) -> None:
        """Something private was computed: the reservation can no longer be given back."""


__all__ = ["ReleaseGate"]
