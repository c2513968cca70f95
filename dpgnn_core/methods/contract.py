"""What a method module hands the registry: its :class:`Implementation` (the module's
``IMPLEMENTATION``), what its fit returns (:class:`Fitted`), and the model file every method
writes and reads the same way (:func:`write_model`, :func:`read_model`).

This module sits below the registry: a method module imports it, never the registry, which
imports the method module by the name its catalogue entry gives (no import circle, no
registration by import side effects). The registry owns saving and loading: a method gives
``build(spec, in_dim, num_classes)``, the untrained model a spec describes, and the registry
writes its weights with the spec and dims, and rebuilds it from them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dpgnn_core.data.graph import GraphData
from dpgnn_core.errors import DpgnnError
from dpgnn_core.io import atomic_file
from dpgnn_core.methods.private_run import PrivateRun
from dpgnn_core.privacy import Ledger
from dpgnn_core.privacy.report import PrivacyReport
from dpgnn_core.privacy.sensitivity import SensitivityCheck
from dpgnn_core.serialize import torch_save

if TYPE_CHECKING:
    from dpgnn_core.methods._staged import Staged

OnStep = Callable[[int, dict[str, float]], None] | None
Metrics = dict[str, dict[str, float]]


class UnknownMethodError(DpgnnError, ValueError):
    """A method name (or spec) no registered method answers to, or a call that does not
    suit the method."""


@dataclass
class Fitted:
    """What :meth:`~dpgnn_core.methods.registry.Method.fit` returns, the same for every
    method.

    Attributes:
        model (torch.nn.Module): the trained model (for GAP, the classifier with its
            encoder attached).
        ledger (Ledger): the privacy events of the run (empty for non-private runs).
        report (PrivacyReport): the privacy report, a frozen
            :class:`~dpgnn_core.privacy.report.PrivacyReport` (a method's fit builds it
            from its report dict with ``PrivacyReport.from_dict``; ``Method.fit`` finishes
            it).
        history (list of dict): one record per step or epoch.
        extra (dict): what evaluation needs beside the model (GAP: the private
            aggregations ``aggregations``).
    """

    model: torch.nn.Module
    ledger: Ledger
    report: PrivacyReport
    history: list[dict[str, Any]]
    extra: dict[str, Any] = field(default_factory=dict)


Fit = Callable[[GraphData, Any, PrivateRun], Fitted]
LedgerFor = Callable[[Any, int], Callable[[float], Ledger]]
Build = Callable[[Any, int, int], torch.nn.Module]
Evaluate = Callable[[torch.nn.Module, GraphData, Any, Mapping[str, Any]], Metrics]


@dataclass(frozen=True)
class Implementation:
    """How a family trains, plans, builds and evaluates: a method module's
    ``IMPLEMENTATION``, read by the registry for every catalogue name of the family.

    Args:
        fit (callable): ``fit(data, spec, run) -> Fitted``, ``run`` the fit's privacy
            engine (:class:`~dpgnn_core.methods.private_run.PrivateRun`).
        ledger_for (callable): ``ledger_for(spec, n_train) -> (z -> Ledger)``, the plan;
            it equals the ledger fit returns (the contract test compares them).
        build (callable): ``build(spec, in_dim, num_classes)``, the untrained model the
            spec describes, whose state dict the saved weights fill.
        evaluate (callable): ``evaluate(model, data, spec, extra) -> metrics per split``.
        sensitivity (tuple, optional): a private family's
            :class:`~dpgnn_core.privacy.sensitivity.SensitivityCheck` of each noisy
            quantity it releases; the contract test runs them and fails a private family
            that declares none. (default: ``()``)
        staged (Staged, optional): the stages a ``staged`` catalogue entry runs as
            (:class:`~dpgnn_core.methods._staged.Staged`). (default: :obj:`None`)
    """

    fit: Fit
    ledger_for: LedgerFor
    build: Build
    evaluate: Evaluate
    sensitivity: tuple[SensitivityCheck, ...] = ()
    staged: Staged | None = None


def node_private(*, train: Callable[..., Any], ledger_for: LedgerFor, build: Build,
                 evaluate: Callable[..., Metrics],
                 eval_options: Callable[[Any], dict[str, Any]] = lambda spec: {},
                 sensitivity: Sequence[SensitivityCheck] = ()) -> Implementation:
    """The :class:`Implementation` of a node-level family trained by one function
    (``train(data, spec, run)``, ``run`` the fit's
    :class:`~dpgnn_core.methods.private_run.PrivateRun`, with ``model``, ``ledger``,
    ``report`` and ``history``) and evaluated by
    ``evaluate(model, data, device, **eval_options(spec))``."""

    def fit(data: GraphData, spec: Any, run: PrivateRun) -> Fitted:
        r = train(data, spec, run)
        return Fitted(r.model, r.ledger, PrivacyReport.from_dict(r.report), r.history)

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        out: Metrics = evaluate(model, data, spec.device, **eval_options(spec))
        return out

    return Implementation(fit=fit, ledger_for=ledger_for, build=build, evaluate=evaluate_,
                          sensitivity=tuple(sensitivity))


def aggregating(title: str, *, fit: Fit, ledger_for: LedgerFor, build: Build,
                evaluate: Callable[..., Metrics], sensitivity: Sequence[SensitivityCheck] = (),
                staged: Staged | None = None) -> Implementation:
    """The :class:`Implementation` of a family that predicts from its cached private
    aggregations (GAP, ProGAP, DPDGC: ``extra["aggregations"]``), evaluated by
    ``evaluate(model, aggregations, data, device)``."""

    def evaluate_(model: torch.nn.Module, data: GraphData, spec: Any,
                  extra: Mapping[str, Any]) -> Metrics:
        if "aggregations" not in extra:
            raise UnknownMethodError(
                f"{title} evaluates from its private aggregations: pass "
                "extra={'aggregations': ...}")
        out: Metrics = evaluate(model, extra["aggregations"], data, spec.device)
        return out

    return Implementation(fit=fit, ledger_for=ledger_for, build=build, evaluate=evaluate_,
                          sensitivity=tuple(sensitivity), staged=staged)


def write_model(path: str, model: torch.nn.Module, spec: Any, in_dim: int,
                num_classes: int) -> None:
    """Write ``model.pt``: the weights with what rebuilds the model (the spec, which names
    its method, and the dims), atomically."""
    with atomic_file(path) as tmp:
        torch_save({"spec": spec.model_dump(mode="json"), "in_dim": in_dim,
                    "num_classes": num_classes,
                    "state_dict": {k: v.cpu() for k, v in model.state_dict().items()}},
                   tmp, target=path)


def read_model(blob: Mapping[str, Any], spec_type: type, build: Build
               ) -> tuple[torch.nn.Module, Any]:
    """(model in eval mode, spec) from a loaded ``model.pt`` (:func:`write_model`'s; a file
    of an older dpgnn also holds a ``kind``, which nothing reads)."""
    spec = spec_type(**blob["spec"])
    model = build(spec, int(blob["in_dim"]), int(blob["num_classes"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval(), spec


__all__ = ["Build", "Evaluate", "Fit", "Fitted", "Implementation", "LedgerFor", "Metrics",
           "OnStep", "UnknownMethodError", "aggregating", "node_private", "read_model",
           "write_model"]
