"""What every private method shares: its plan (noise ↦ ledger) and how it is calibrated to
the target (ε, δ) (:func:`calibrate_to_target`, which the fit's engine,
:class:`~dpgnn_core.methods.private_run.PrivateRun`, and the early plan both use), the
warnings about weak settings and what every report says about its scope."""

from __future__ import annotations

import warnings
from collections.abc import Callable
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
from dpgnn_core.privacy.events import Level

M = TypeVar("M", bound=torch.nn.Module)

#: What a fit calls after every step: (step, record); the record is the step's history
#: entry (a fit's engine, :class:`~dpgnn_core.methods.private_run.PrivateRun`, passes it
#: on with ``epsilon`` and ``total_steps``).
OnStep = Callable[[int, dict[str, float]], None]
#: The generic progress callback of long stages (subgraph sampling, PMA hops): (stage name,
#: done, total); a fit reaches it through its engine (``PrivateRun.progress``).
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


#: (spec, N) ↦ (noise multiplier ↦ the ledger of the spec's steps): a method's plan.
LedgerFor = Callable[[Any, int], Callable[[float], Ledger]]


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
    of it, or the noise calibrated to ``spec.epsilon``. What :meth:`PrivateRun.calibrate` and
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
