"""What every private method shares: calibrating its plan to the target (ε, δ) with the
report that goes with it, declaring that plan so the registry computes the run's ε curve
(:class:`StepPlan`, :class:`EpsilonCurve`), and saving its model."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DataError
from dpgnn_core.privacy import (
    Ledger,
    PoissonGaussianEvent,
    PrivacyError,
    calibrate_noise,
    make_accountant,
    max_steps,
)
from dpgnn_core.privacy import gate as release_gate
from dpgnn_core.privacy.events import Level

M = TypeVar("M", bound=torch.nn.Module)

#: What a fit calls after every step: (step, record); the record is the step's history
#: entry, to which the registry adds ``epsilon`` and ``total_steps`` in a private fit
#: (:class:`EpsilonCurve`; a staged method's stages with :func:`with_epsilon`).
OnStep = Callable[[int, dict[str, float]], None]
#: The generic progress callback of long stages (subgraph sampling, PMA hops): (stage name,
#: done, total). Callers that only pass ``on_step`` (the registry) can attach it to their
#: on_step callable as its ``progress`` attribute (:func:`stage_progress`).
StageProgress = Callable[[str, int, int], None]


@dataclass
class PrivateResult(Generic[M]):
    """A trained model with its ledger, its privacy report's entries (a dict: the
    registry's ``Method.fit`` adds the ε curve and freezes it into a
    :class:`~dpgnn_core.privacy.report.PrivacyReport`) and its per-step history."""

    model: M
    ledger: Ledger
    report: dict[str, Any]
    history: list[dict[str, float]]


def check_node_task(data: GraphData, spec: Any, method: str) -> int:
    """Refuse what no node method can train on; return the number of training nodes."""
    if data.task != "node" or data.multi_label:
        raise DataError(f"{method} classifies nodes with single labels", field="task",
                        value=data.task)
    n_train = int(data.mask("train").sum())
    if n_train == 0:
        raise DataError("the dataset has no training node", field="split", value="train")
    if (np.asarray(data.y)[data.mask("train")] < 0).any():
        raise DataError("a training node has no label", field="y", value=-1)
    if spec.batch_size is not None and spec.batch_size > n_train:
        raise DataError(f"batch size {spec.batch} exceeds the {n_train} training nodes",
                        field="batch_size", value=spec.batch)
    return n_train


def poisson_plan(spec: Any, num_train: int, level: Level, description: str
                 ) -> Callable[[float], Ledger]:
    """z ↦ the ledger of DP-SGD over Poisson-sampled records: ``spec.steps`` steps at rate
    ``spec.batch / num_train`` (DP-MLP: nodes; graph classification: graphs)."""
    spec = spec.with_batch_size(num_train)
    rate = spec.batch / num_train

    def ledger(z: float) -> Ledger:
        return Ledger().add(PoissonGaussianEvent(noise_multiplier=z, sampling_rate=rate,
                                                 steps=spec.steps, level=level,
                                                 description=description),
                            sampler_scheme="poisson")
    return ledger


def resolve_steps(spec: Any, num_train: int,
                  make_plan: Callable[[Any, int], Callable[[float], Ledger]],
                  delta_scale: float = 10.0) -> Any:
    """With ``spec.noise_multiplier`` set, the spec with ``steps`` = the most steps whose ε
    at that noise stays within ``spec.epsilon`` (train until the budget is spent)."""
    if spec.noise_multiplier is None:
        return spec
    delta = spec.delta if spec.delta is not None else 1.0 / (delta_scale * num_train)
    steps = max_steps(lambda t: make_plan(spec.model_copy(update={"steps": t}), num_train)(
        spec.noise_multiplier), spec.epsilon, delta, make_accountant(spec.accountant),
        limit=MAX_STEPS)
    if steps == 0:
        raise PrivacyError(f"noise multiplier {spec.noise_multiplier} spends more than "
                           f"epsilon {spec.epsilon} in one step; raise the noise or the "
                           "budget")
    return spec.model_copy(update={"steps": steps})


#: Cap on "train until the budget is spent".
MAX_STEPS = 10**6


def stage_progress(on_step: OnStep | None,
                   progress: StageProgress | None = None) -> StageProgress | None:
    """``progress`` if given, else the ``progress`` attribute of ``on_step`` (how a caller
    that can pass only ``on_step``, e.g. through the registry, also follows the stages)."""
    if progress is not None:
        return progress
    found = getattr(on_step, "progress", None)
    return found if callable(found) else None


#: (spec, N) ↦ (noise multiplier ↦ the ledger of the spec's steps): a method's plan.
LedgerFor = Callable[[Any, int], Callable[[float], Ledger]]


@dataclass(frozen=True)
class StepPlan:
    """A private fit's calibrated plan, what its ε curve is computed from: the fit declares
    it when it calibrates (:func:`calibrated_plan` does), and the registry's
    :meth:`~dpgnn_core.methods.registry.Method.fit` computes the curve from it with the
    method's registered ``ledger_for``, once.

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


class EpsilonCurve:
    """The ε curve of one fit, kept by :meth:`~dpgnn_core.methods.registry.Method.fit`
    (:func:`follow_epsilon` installs it): it receives the :class:`StepPlan` the fit
    declares when it calibrates, and its :attr:`on_step` gives the caller's ``on_step``
    every later record with ``epsilon`` (ε spent so far, an upper bound:
    :func:`epsilon_per_step`) and ``total_steps``. A record that already holds
    ``epsilon`` (a staged method's own hook, :func:`with_epsilon`) passes unchanged.

    Args:
        on_step (callable, optional): the caller's ``on_step``.
        ledger_for (callable): the method's plan, (spec, N) ↦ (z ↦ ledger).

    Attributes:
        on_step (callable, optional): what the fit is given as its ``on_step`` (None when
            the caller passed none); the caller's ``progress`` attribute is kept.
        plan (StepPlan, optional): the declared plan (None: none declared yet).
    """

    def __init__(self, on_step: OnStep | None, ledger_for: LedgerFor) -> None:
        self.plan: StepPlan | None = None
        self._inner = on_step
        self._ledger_for = ledger_for
        self._points: list[tuple[int, float]] = []
        self._per_step: list[float] = []
        self.on_step: OnStep | None = None
        if on_step is not None:
            def call(step: int, rec: dict[str, float]) -> None:
                self._call(step, rec)

            progress = getattr(on_step, "progress", None)
            if callable(progress):
                call.progress = progress  # type: ignore[attr-defined]
            self.on_step = call

    def declare(self, plan: StepPlan) -> None:
        """The fit's calibrated plan (the last declared counts): its curve is computed
        here, before the fit's first step, as the fit calibrates."""
        self.plan = plan
        self._points = plan.curve(self._ledger_for)
        self._per_step = epsilon_per_step(self._points, int(plan.spec.steps))

    def points(self) -> list[tuple[int, float]]:
        """The declared plan's ε curve (empty without a plan)."""
        return list(self._points)

    def _call(self, step: int, rec: dict[str, float]) -> None:
        assert self._inner is not None
        if "epsilon" not in rec:
            rec = _with_step_epsilon(rec, step, self._per_step)
        self._inner(step, rec)


_CURVE: ContextVar[EpsilonCurve | None] = ContextVar("dpgnn_epsilon_curve", default=None)


@contextmanager
def follow_epsilon(on_step: OnStep | None, ledger_for: LedgerFor) -> Iterator[EpsilonCurve]:
    """Keep the ε curve of the fit run inside the block (what
    :meth:`~dpgnn_core.methods.registry.Method.fit` does around every method's fit). A
    context variable, as :mod:`dpgnn_core.privacy.gate`'s: threads and nested fits each
    see their own."""
    curve = EpsilonCurve(on_step, ledger_for)
    token = _CURVE.set(curve)
    try:
        yield curve
    finally:
        _CURVE.reset(token)


def declare_plan(plan: StepPlan) -> None:
    """Give the fit's calibrated plan to the curve kept for it (nothing outside
    :func:`follow_epsilon`: a method's function called directly returns no curve)."""
    curve = _CURVE.get()
    if curve is not None:
        curve.declare(plan)


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


def with_epsilon(on_step: OnStep | None, epsilons: Sequence[float]) -> OnStep | None:
    """``on_step`` whose record also holds ``epsilon``, ε spent so far (``epsilons[t - 1]``
    after step t, an upper bound), and ``total_steps``. The record is a copy: the history
    keeps ``epsilon_spent`` at the curve's steps only (:func:`record_epsilon`). The
    ``progress`` attribute of ``on_step`` is kept."""
    if on_step is None or not epsilons:
        return on_step
    inner = on_step

    def call(step: int, rec: dict[str, float]) -> None:
        inner(step, _with_step_epsilon(rec, step, epsilons))

    progress = getattr(on_step, "progress", None)
    if callable(progress):
        call.progress = progress  # type: ignore[attr-defined]
    return call


def _with_step_epsilon(rec: dict[str, float], step: int, epsilons: Sequence[float]
                       ) -> dict[str, float]:
    """A copy of ``rec`` with ``epsilon`` (``epsilons[step - 1]``, clamped to the list)
    and ``total_steps``; ``rec`` itself unchanged when ``epsilons`` is empty."""
    if not epsilons:
        return rec
    total = len(epsilons)
    return {**rec, "epsilon": epsilons[min(max(step, 1), total) - 1], "total_steps": total}


def record_epsilon(history: list[dict[str, float]], curve: Sequence[tuple[int, float]]
                   ) -> None:
    """Put ``epsilon_spent`` into the history at the curve's steps."""
    for t, eps in curve:
        if 1 <= t <= len(history):
            history[t - 1]["epsilon_spent"] = eps


def check_delta_vs_n(delta: float, n_train: int, *, warn: bool = True) -> list[str]:
    """Warnings for a δ that is not small against the number of protected records.

    A mechanism that publishes one training record chosen at random is
    (0, 1/N_train)-DP, so δ >= 1/N_train allows leaking a whole record. Every private
    method calls this (GAP from its own calibration) and puts the messages in its privacy
    report under ``"warnings"``.

    Args:
        delta (float): the run's δ.
        n_train (int): N_train, the number of protected training records.
        warn (bool, optional): also emit each message as a :class:`UserWarning`.
            (default: :obj:`True`)

    Returns:
        list of str: the messages (empty when δ < 1/N_train).
    """
    if n_train < 1 or delta < 1.0 / n_train:
        return []
    msg = (f"delta = {delta:.3g} >= 1/N_train = 1/{n_train} = {1.0 / n_train:.3g}: "
           "publishing one training record at random satisfies (0, 1/N_train)-DP, so this "
           "guarantee does not rule out leaking a record; use delta well below 1/N_train "
           f"(the default is 1/(10 N_train) = {1.0 / (10 * n_train):.3g})")
    if warn:
        warnings.warn(msg, UserWarning, stacklevel=3)
    return [msg]


#: Above this target ε a run is accepted but warned about: e^20 is a likelihood ratio of
#: about 5e8, which rules out little.
WEAK_EPSILON = 20.0


def check_weak_budget(epsilon: float | None, delta: float, n_train: int, *,
                      warn: bool = True) -> list[str]:
    """Every warning about weak privacy settings, for the report's ``"warnings"``: δ not
    small against N_train (:func:`check_delta_vs_n`) and ε above :data:`WEAK_EPSILON`.
    Weak settings are accepted, loudly."""
    out = check_delta_vs_n(delta, n_train, warn=warn)
    if epsilon is not None and epsilon > WEAK_EPSILON:
        msg = (f"epsilon = {epsilon:g} > {WEAK_EPSILON:g}: the guarantee bounds an "
               f"adversary's likelihood ratio by e^{epsilon:g}, which rules out little; "
               "report it as weak privacy")
        if warn:
            warnings.warn(msg, UserWarning, stacklevel=3)
        out.append(msg)
    return out


def plan_delta(spec: Any, num_train: int, delta_scale: float = 10.0) -> float:
    """The run's δ: ``spec.delta``, else 1/(``delta_scale`` N_train)."""
    return spec.delta if spec.delta is not None else 1.0 / (delta_scale * num_train)


def calibrate_to_target(spec: Any, plan: Callable[[float], Ledger], delta: float
                        ) -> tuple[float, float, str]:
    """(noise multiplier, ε, how) of a private ``spec``'s ``plan`` at ``delta``: the fixed
    ``spec.noise_multiplier`` (its steps from :func:`resolve_steps`) and the accountant's ε
    of it, or the noise calibrated to ``spec.epsilon``. What :func:`calibrated_plan` and
    the early plan (:mod:`dpgnn_core.methods.early_plan`) both calibrate with."""
    accountant = make_accountant(spec.accountant)
    if getattr(spec, "noise_multiplier", None) is not None:
        lam = float(spec.noise_multiplier)
        return lam, accountant.epsilon(plan(lam), delta), ("noise fixed; trained until "
                                                            "the budget was spent")
    cal = calibrate_noise(plan, spec.epsilon, delta, accountant)
    return cal.noise_multiplier, cal.epsilon, "steps fixed; noise calibrated to the budget"


def resolve_row_plan(spec: Any, num_train: int, make_plan: LedgerFor) -> Any:
    """``spec`` as a row-sampling fit (DP-MLP, graph classification) calibrates it: the
    batch size adapted to N_train, then "train until spent" steps (:func:`resolve_steps`)."""
    return resolve_steps(spec.with_batch_size(num_train), num_train, make_plan)


def calibrated_plan(spec: Any, num_train: int, plan: Callable[[float], Ledger], *,
                    method: str, protects: str, delta_scale: float = 10.0
                    ) -> tuple[Ledger, float, dict[str, Any]]:
    """Calibrate ``plan`` (noise ↦ ledger) to ``spec.epsilon`` at ``spec.delta`` (1/(10 N)
    by default). Without ``spec.epsilon`` the run is non-private: an empty ledger, noise 0
    and ε = inf in the report, which says so.

    A private plan is declared as the fit's :class:`StepPlan` (:func:`declare_plan`):
    ``spec`` is the one the fit trains (``plan`` must be the method's ``ledger_for(spec,
    num_train)``), so the registry's ``Method.fit`` gives every ``on_step`` record ε
    spent so far, and adds the ε curve to the report (``epsilon_by_step``) and to the
    history (``epsilon_spent``).

    Returns:
        (Ledger, float, dict): the ledger of the whole plan, the noise multiplier, and the
        privacy report.
    """
    private = spec.epsilon is not None
    delta = plan_delta(spec, num_train, delta_scale)
    report: dict[str, Any] = {"method": method if private else f"{method}-non-private",
                              "private": private, "delta": delta, "steps": spec.steps,
                              "batch_size": spec.batch_size,
                              "unaccounted": [], "protects": protects if private else "nothing",
                              "warnings": []}
    if not private:
        report.update({"epsilon": math.inf, "noise_multiplier": 0.0})
        return Ledger(), 0.0, report
    report["warnings"] = check_weak_budget(spec.epsilon, delta, num_train)
    lam, eps, report["budget"] = calibrate_to_target(spec, plan, delta)
    report.update({"epsilon": eps, "target_epsilon": spec.epsilon,
                   "noise_multiplier": lam, "accountant": spec.accountant})
    ledger = plan(lam)
    report.update(guarantee_scope(ledger))
    # The calibrated plan, before anything private is computed: a budget keeper installed
    # by the caller (tasks.budget) reserves it against the dataset's budget, or refuses.
    release_gate.before_release(ledger, {"method": method, "epsilon": eps, "delta": delta})
    declare_plan(StepPlan(spec, num_train, lam, delta))
    return ledger, lam, report


#: What every report states about the scope of its guarantee (issue: claims exactly).
SCOPE = ("the guarantee is relative to the ingested dataset: ingestion read the raw data "
         "without privacy (feature vocabulary, class filtering, removal of isolated nodes, "
         "stratified splits), so neighbouring datasets are neighbouring ingested datasets")
PUBLIC_COUNT = ("the number of training records N is treated as public: the sampling rate "
                "m/N and the default delta 1/(10 N) are computed from it")


def guarantee_scope(ledger: Ledger) -> dict[str, Any]:
    """The protection level (unit) and neighbouring relation of ``ledger``'s events, and
    what every guarantee here assumes public."""
    levels = sorted({e.level for e in ledger.events})
    relations = sorted({e.relation for e in ledger.events})
    return {"level": levels[0] if len(levels) == 1 else levels,
            "relation": relations[0] if len(relations) == 1 else relations,
            "scope": SCOPE, "public": [PUBLIC_COUNT]}
