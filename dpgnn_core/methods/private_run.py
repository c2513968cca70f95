"""The privacy engine of one fit: :class:`PrivateRun`, the one object every private step of
a fit passes through (as Opacus's ``PrivacyEngine``), and :func:`assemble_report`, the one
helper that finishes every method's privacy report and history.

A fit gets its engine from :meth:`~dpgnn_core.methods.registry.Method.fit` (or builds a bare
one: library use, no budget, no ε curve) and calls it, in this order::

    ledger, z, report = run.calibrate(spec, n, plan, method=..., protects=...)
        # calibrate to (ε, δ), reserve the whole plan with the budget keeper's gate (or
        # be refused: nothing private has been computed), declare the plan (ε curve)
    run.admit(plan, info)      # a staged run's stage that releases nothing private yet
    run.reserve(plan, info)    # a staged run's stage before its private computation
    run.step(t, record)        # after each trained step: a release; ε spent so far
    run.released()             # a release that is not a step (PMA's noisy aggregations)
    run.progress(stage, done, total)   # long stages (subgraph sampling, PMA hops)

and the registry finishes its result with :func:`assemble_report` (the ε curve in the report
and history, the raw-loss note, the ledger). A staged method's last stage calls the same
helper with its own curve; the pipeline (``tasks/staged.py``) types it with
:func:`typed_report`.

The budget keeper (``tasks.budget.TaskGate``, or any
:class:`~dpgnn_core.privacy.gate.ReleaseGate`) is the engine's ``gate``: handed in by the
caller, never found in a context variable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpgnn_core.methods._private import (
    LedgerFor,
    OnStep,
    StageProgress,
    calibrate_to_target,
    check_weak_budget,
    guarantee_scope,
    plan_delta,
)
from dpgnn_core.privacy import Ledger, PrivacyError, make_accountant
from dpgnn_core.privacy.gate import ReleaseGate
from dpgnn_core.privacy.report import PrivacyReport, with_loss_note


@dataclass(frozen=True)
class StepPlan:
    """A private fit's calibrated plan, what its ε curve is computed from: the fit's
    :meth:`PrivateRun.calibrate` declares it, and the engine computes the curve from it with
    the method's registered ``ledger_for``, once.

    Attributes:
        spec: the spec the fit calibrated, as it trains it (``steps``, the batch size and
            any option the method resolved for the data set; ``accountant``).
        num_train (int): the number of training records N.
        noise_multiplier (float): the calibrated noise multiplier.
        delta (float): δ.
    """

    spec: Any
    num_train: int
    noise_multiplier: float
    delta: float

    def curve(self, ledger_for: LedgerFor) -> list[tuple[int, float]]:
        """ε spent after step t of the plan: every step with RDP, 20 points with PLD
        (:func:`~dpgnn_core.privacy.calibrate.epsilon_curve`); the last is the plan's ε."""
        from dpgnn_core.privacy.calibrate import epsilon_curve

        def ledger_after(t: int) -> Ledger:
            return ledger_for(self.spec.model_copy(update={"steps": t}), self.num_train)(
                self.noise_multiplier)

        return epsilon_curve(ledger_after, int(self.spec.steps), self.delta,
                             make_accountant(self.spec.accountant))


class PrivateRun:
    """One fit's privacy engine: it calibrates, reserves, records releases, reports each
    step (with ε spent so far) and the progress of long stages.

    Args:
        on_step (callable, optional): the caller's ``on_step(step, record)``; every record
            it gets carries ``epsilon`` (ε spent so far, an upper bound:
            :func:`epsilon_per_step`) and ``total_steps`` once a plan is declared (or a
            staged method's stage set its values, :meth:`follow`).
        progress (callable, optional): the caller's ``progress(stage, done, total)``.
        gate (ReleaseGate, optional): the budget keeper; without one nothing is reserved.
        ledger_for (callable, optional): the method's plan, (spec, N) ↦ (z ↦ ledger), from
            which a declared plan's ε curve is computed (without it: no curve).
        step_releases (bool, optional): each trained step is a release (it changes what
            the run publishes) and tells the gate so. (default: :obj:`True`)

    Attributes:
        plan (StepPlan, optional): the declared plan (None: none declared yet).
    """

    def __init__(self, on_step: OnStep | None = None, *, progress: StageProgress | None = None,
                 gate: ReleaseGate | None = None, ledger_for: LedgerFor | None = None,
                 step_releases: bool = True) -> None:
        self.plan: StepPlan | None = None
        self.gate = gate
        self._on_step = on_step
        self._progress = progress
        self._ledger_for = ledger_for
        self._step_releases = step_releases
        self._points: list[tuple[int, float]] = []
        self._per_step: list[float] = []

    # --- calibration and the budget -----------------------------------------------------
    def calibrate(self, spec: Any, num_train: int, plan: Any, *, method: str, protects: str,
                  delta_scale: float = 10.0) -> tuple[Ledger, float, dict[str, Any]]:
        """Calibrate ``plan`` (noise ↦ ledger, the method's ``ledger_for(spec,
        num_train)``) to ``spec.epsilon`` at ``spec.delta`` (1/(10 N) by default), reserve
        it (:meth:`reserve`: the gate may refuse, before anything private is computed) and
        declare it (:class:`StepPlan`: the ε of every later step, the report's curve).
        Without ``spec.epsilon`` the run is non-private: an empty ledger, noise 0 and
        ε = inf in the report, which says so.

        Returns:
            (Ledger, float, dict): the ledger of the whole plan, the noise multiplier, and
            the privacy report.
        """
        private = spec.epsilon is not None
        delta = plan_delta(spec, num_train, delta_scale)
        report: dict[str, Any] = {
            "method": method if private else f"{method}-non-private", "private": private,
            "delta": delta, "steps": spec.steps, "batch_size": spec.batch_size,
            "unaccounted": [], "protects": protects if private else "nothing",
            "warnings": []}
        if not private:
            report.update({"epsilon": math.inf, "noise_multiplier": 0.0})
            return Ledger(), 0.0, report
        report["warnings"] = check_weak_budget(spec.epsilon, delta, num_train)
        lam, eps, report["budget"] = calibrate_to_target(spec, plan, delta)
        report.update({"epsilon": eps, "target_epsilon": spec.epsilon,
                       "noise_multiplier": lam, "accountant": spec.accountant})
        ledger: Ledger = plan(lam)
        report.update(guarantee_scope(ledger))
        self.reserve(ledger, {"method": method, "epsilon": eps, "delta": delta})
        self.declare(StepPlan(spec, num_train, lam, delta))
        return ledger, lam, report

    def declare(self, plan: StepPlan) -> None:
        """The fit's calibrated plan (the last declared counts): its ε curve is computed
        here, before the fit's first step (with the engine's ``ledger_for`` only)."""
        self.plan = plan
        if self._ledger_for is not None:
            self._points = plan.curve(self._ledger_for)
            self._per_step = epsilon_per_step(self._points, int(plan.spec.steps))

    def reserve(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        """The whole calibrated plan ``ledger`` to the gate before the first private
        computation: it reserves it against the dataset's budget or refuses by raising. A
        second call in one run (a staged run's next stage) reserves nothing more."""
        if self.gate is not None and ledger.entries:
            self.gate.before_release(ledger, dict(info))

    def admit(self, ledger: Ledger, info: Mapping[str, Any]) -> None:
        """A staged run's whole plan to the gate's check (its ``admit``, if it has one)
        before a stage that releases nothing private trains: refused there, a plan costs
        no training; nothing is reserved."""
        check = getattr(self.gate, "admit", None)
        if check is not None and ledger.entries:
            check(ledger, dict(info))

    def released(self) -> None:
        """Something private was computed: the reservation is spent for good."""
        if self.gate is not None:
            self.gate.released()

    # --- steps and progress -------------------------------------------------------------
    def follow(self, epsilons: Sequence[float]) -> None:
        """A staged method's stage: ε spent after each of its steps (``epsilons[t - 1]``
        after step t, counted over the whole run), for the records :meth:`step` passes."""
        self._per_step = list(epsilons)

    @property
    def watched(self) -> bool:
        """Whether the caller follows the steps (a staged method computes its per-step ε
        for :meth:`follow` only then)."""
        return self._on_step is not None

    @property
    def on_step(self) -> OnStep | None:
        """What a training loop calls after each step: :meth:`step`, or None when there is
        nothing to tell (no caller's ``on_step``, no gate a step releases to)."""
        if self._on_step is None and (self.gate is None or not self._step_releases):
            return None
        return self.step

    def step(self, step: int, record: dict[str, float]) -> None:
        """After trained step ``step``: a release (the gate is told), then the caller's
        ``on_step`` with a copy of ``record`` carrying ε spent so far and ``total_steps``
        (a record with its own ``epsilon`` passes unchanged)."""
        if self._step_releases:
            self.released()
        if self._on_step is not None:
            if "epsilon" not in record:
                record = _with_step_epsilon(record, step, self._per_step)
            self._on_step(step, record)

    @property
    def stage_progress(self) -> StageProgress | None:
        """The caller's ``progress(stage, done, total)`` (None: nobody follows stages)."""
        return self._progress

    def progress(self, stage: str, done: int, total: int) -> None:
        """A long stage's progress to the caller."""
        if self._progress is not None:
            self._progress(stage, done, total)

    def points(self) -> list[tuple[int, float]]:
        """The declared plan's ε curve (empty without a plan or ``ledger_for``)."""
        return list(self._points)


def epsilon_per_step(curve: Sequence[tuple[int, float]], total: int) -> list[float]:
    """An upper bound on ε spent after each step 1..``total`` from a curve computed at some
    steps: the value at the first computed step at or after it (ε grows with the steps), as
    a running maximum, so it never decreases and never under-reports. The last value is the
    curve's last (its largest, as the accountant's ε grows with the steps)."""
    points = sorted((int(t), float(e)) for t, e in curve)
    if not points:
        return []
    out: list[float] = []
    j = 0
    for t in range(1, total + 1):
        while j < len(points) - 1 and points[j][0] < t:
            j += 1
        out.append(points[j][1])
    for i in range(1, len(out)):  # never below an earlier value
        out[i] = max(out[i], out[i - 1])
    return out


def _with_step_epsilon(rec: dict[str, float], step: int, epsilons: Sequence[float]
                       ) -> dict[str, float]:
    """A copy of ``rec`` with ``epsilon`` (``epsilons[step - 1]``, clamped to the list)
    and ``total_steps``; ``rec`` itself unchanged when ``epsilons`` is empty."""
    if not epsilons:
        return rec
    total = len(epsilons)
    return {**rec, "epsilon": epsilons[min(max(step, 1), total) - 1], "total_steps": total}


def record_epsilon(history: list[dict[str, Any]], curve: Sequence[tuple[int, float]]
                   ) -> None:
    """Put ``epsilon_spent`` into the history at the curve's steps."""
    for t, eps in curve:
        if 1 <= t <= len(history):
            history[t - 1]["epsilon_spent"] = eps


def assemble_report(report: Mapping[str, Any], ledger: Ledger,
                    history: Sequence[Mapping[str, Any]], spec: Any,
                    points: Sequence[tuple[int, float]] = (), *, who: str = "the method"
                    ) -> tuple[dict[str, Any], Ledger, list[dict[str, Any]]]:
    """A run's finished report (a dict), ledger and history, the same way for every
    method: a private run's ε curve (the report's own ``epsilon_by_step``, else
    ``points``, its declared plan's) in the report and as ``epsilon_spent`` in the history,
    the raw-loss note (:func:`~dpgnn_core.privacy.report.with_loss_note`) and the ledger
    in the report. Applying it again changes nothing.

    Raises:
        PrivacyError: a private run with no ε curve (``who`` names the method).
    """
    out = dict(report)
    rows = [dict(r) for r in history]
    if out.get("private"):
        curve = list(out.get("epsilon_by_step") or points)
        if not curve:
            raise PrivacyError(f"{who}'s fit declared no calibrated plan and gave no "
                               "epsilon curve: calibrate with PrivateRun.calibrate, or put "
                               "the curve in the report's epsilon_by_step")
        out["epsilon_by_step"] = curve
        record_epsilon(rows, curve)
    out, ledger = with_loss_note(out, ledger, bool(getattr(spec, "log_raw_loss", False)))
    out["ledger"] = ledger
    return out, ledger, rows


def typed_report(report: Mapping[str, Any], ledger: Ledger,
                 history: Sequence[Mapping[str, Any]], spec: Any,
                 points: Sequence[tuple[int, float]] = (), *, who: str = "the method"
                 ) -> tuple[PrivacyReport, Ledger, list[dict[str, Any]]]:
    """:func:`assemble_report`, the report frozen into a
    :class:`~dpgnn_core.privacy.report.PrivacyReport` (what the registry and the staged
    pipeline store)."""
    out, ledger, rows = assemble_report(report, ledger, history, spec, points, who=who)
    return PrivacyReport.from_dict(out), ledger, rows


__all__ = ["PrivateRun", "StepPlan", "assemble_report", "epsilon_per_step",
           "record_epsilon", "typed_report"]
