"""The release gate: where a run's calibrated plan meets the dataset's privacy budget.

Every private path of the core calls :func:`before_release` with its calibrated ledger
(the whole plan) after calibration and before its first private release, and
:func:`released` as soon as something private exists (a trained step, a PMA release). The
core itself keeps no budget: a caller that does (``tasks.budget``, over the SQLite store of
:mod:`dpgnn_core.budget`) installs a :class:`ReleaseGate` with :func:`gated` for the
duration of a run; the gate may refuse by raising (:class:`~dpgnn_core.budget.
BudgetExceeded`), before any private data has been released. Without a gate, both calls do
nothing (library use).

A staged run whose first stages release nothing private (GAP-EDP's encoder, ProGAP-EDP's
stage 0) calls :func:`admit` with the same plan before they train: a budget keeper that
can check without reserving (an ``admit`` method) refuses there, so a plan the budget
refuses costs no training; the reservation still comes with :func:`before_release`.

A context variable, not a global, so threads and concurrent flows each see their own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from dpgnn_core.privacy.events import Ledger


class ReleaseGate(Protocol):
    """What a budget keeper implements."""

    def before_release(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        """Check and reserve ``ledger`` (a run's whole calibrated plan); raise to refuse.
        Called once per computed stage: a second call in one run must not charge again."""

    def released(self) -> None:
        """Something private was computed: the reservation can no longer be given back."""


_GATE: ContextVar[ReleaseGate | None] = ContextVar("dpgnn_release_gate", default=None)


@contextmanager
def gated(gate: ReleaseGate) -> Iterator[ReleaseGate]:
    """Install ``gate`` for the private paths run inside the block."""
    token = _GATE.set(gate)
    try:
        yield gate
    finally:
        _GATE.reset(token)


def current() -> ReleaseGate | None:
    """The installed gate, if any."""
    return _GATE.get()


def before_release(ledger: Ledger, info: Mapping[str, Any] | None = None) -> None:
    """Called by the core with the calibrated plan before its first private release."""
    gate = _GATE.get()
    if gate is not None and ledger.entries:
        gate.before_release(ledger, dict(info or {}))


def admit(ledger: Ledger, info: Mapping[str, Any] | None = None) -> None:
    """Called by the core with a staged run's whole plan before a stage that releases
    nothing private trains: the installed gate's ``admit`` (if it has one) checks the plan
    against the budget without reserving it, and raises to refuse."""
    gate = _GATE.get()
    check = getattr(gate, "admit", None)
    if check is not None and ledger.entries:
        check(ledger, dict(info or {}))


def released() -> None:
    """Called by the core once something private has been computed."""
    gate = _GATE.get()
    if gate is not None:
        gate.released()


__all__ = ["ReleaseGate", "admit", "before_release", "current", "gated", "released"]
